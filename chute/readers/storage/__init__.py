"""chute.readers.storage: where bytes live: local files, confined paths, URLs, object storage
and the node cache.

The names below are what `chute.convert` writes files and objects with."""

from chute._lazy import lazy_attributes

# public name -> module that defines it (loaded on first access: no import loop, and
# reading a local dataset loads no object storage code)
_LAZY = {
    "CHECKSUM": "chute.readers.storage._files",
    "fsync_dir": "chute.readers.storage._files",
    "is_disk_full": "chute.readers.storage._files",
    "no_space": "chute.readers.storage._files",
    "read_regular_file": "chute.readers.storage._files",
    "write_skipped": "chute.readers.storage._files",
    "ConflictError": "chute.readers.storage._object_store",
    "Remote": "chute.readers.storage._object_store",
    "StorageError": "chute.readers.storage._object_store",
    "is_remote": "chute.readers.storage._object_store",
    "listed_objects": "chute.readers.storage._rewritten",
    "beside": "chute.readers.storage._storage",
    "destination": "chute.readers.storage._storage",
    "local_path": "chute.readers.storage._storage",
    "name_of": "chute.readers.storage._storage",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
