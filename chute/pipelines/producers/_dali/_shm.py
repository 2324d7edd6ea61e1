"""The shared memory DALI's parallel external source needs, checked before building the graph.

DALI's worker processes hand batches back through shared-memory chunks under /dev/shm: per
worker, one chunk per prefetched batch (plus the one being filled), each sized
batch_size x bytes_per_sample_hint at first. Docker's default /dev/shm is 64 MB, where DALI would
fail with a bus error or an opaque allocation failure deep inside a worker.
"""

from __future__ import annotations

import os

from chute.errors import BackendUnavailableError

__all__ = ["check_shm", "shm_needed", "shm_free"]

SHM_PATH = "/dev/shm"


def shm_needed(config) -> int:
    """Bytes of shared memory the parallel external source of `config` allocates at first.

    Args:
        config: a DaliGraphConfig (py_num_workers, prefetch, batch_size, bytes_per_sample_hint).
    """
    chunks = config.py_num_workers * (config.prefetch + 1)
    return chunks * config.batch_size * config.bytes_per_sample_hint


def shm_free(path: str = SHM_PATH) -> int | None:
    """Free bytes of the shared-memory filesystem, or None where there is none to ask."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def check_shm(config, free: int | None = None, path: str = SHM_PATH) -> None:
    """Raise BackendUnavailableError when `path` has less free space than `config` needs.

    Args:
        config: the DaliGraphConfig of a graph with parallel=True.
        free: free bytes (None: measured on `path`; unknown sizes pass).
        path: the shared-memory filesystem.
    """
    free = shm_free(path) if free is None else free
    needed = shm_needed(config)
    if free is None or free >= needed:
        return
    mib = 1 << 20
    raise BackendUnavailableError(
        f"DALI's parallel external source needs about {needed // mib} MiB of shared memory "
        f"({config.py_num_workers} workers x {config.prefetch + 1} batches x "
        f"{config.batch_size} samples x {config.bytes_per_sample_hint // 1024} KiB), but {path} "
        f"has {free // mib} MiB free. Enlarge it (docker run --shm-size=...), or use "
        "backend_options={'py_workers': 0}."
    )
