"""chute on Ray Data (optional extra `chute[ray]`, docs/ray.md): converts run as Ray tasks
(`RayEngine`, `chute convert ... --engine ray`), any Ray Dataset is written as a chute dataset
(`write_dataset`) and a chute dataset is read as a Ray Dataset, one block per shard
(`read_dataset`). `shutdown` stops the Ray instance chute started.

Ray is imported when one of these is first used, so `import chute.ray` works without it."""

from chute._lazy import lazy_attributes

_LAZY = {
    "RayEngine": "chute.ray._engine",
    "write_dataset": "chute.ray._sink",
    "read_dataset": "chute.ray._source",
    "shutdown": "chute.ray._runtime",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
