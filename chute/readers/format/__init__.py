"""chute.readers.format: the shard format on disk: manifest, MMIDIDX records, layout.

The names below are what `chute.convert` writes the format with."""

from chute._lazy import lazy_attributes

# public name -> module that defines it (loaded on first access: no import loop, and
# reading a local dataset loads no object storage code)
_LAZY = {
    "FORMAT": "chute.readers.format._manifest",
    "MANIFEST": "chute.readers.format._manifest",
    "VERSION": "chute.readers.format._manifest",
    "write_manifest": "chute.readers.format._manifest",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
