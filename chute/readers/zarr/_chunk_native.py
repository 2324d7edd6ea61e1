"""A batch of one-row zarr chunks read and decompressed into the batch by C code
(`_native/zarr_chunks.c`), on every chunk-reading thread at once, without the GIL
(docs/design.md, "Zarr groups").

The shim is built once per machine (`chute/_native_build.py`) and called through ctypes, which
releases the GIL for the call; libzstd's functions are those `readers/zarr/_zstd_native.py`
found. Where the shim cannot be built or no libzstd is found, `chunk_reader_status()` says why
and `readers/zarr/_zarr_chunks.py` reads chunk by chunk in Python instead (same bytes, more
time per chunk).
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from chute._fork import ProcessPool
from chute._native_build import NativeShim, ShimStatus, load_function
from chute.errors import BackendUnavailableError
from chute.readers.storage._open_beneath import available
from chute.readers.storage._paths import Confined
from chute.readers.zarr._zstd_native import decoder

__all__ = ["ChunkReaderStatus", "chunk_reader_status", "read_chunks", "CHUNK_ERRORS", "MISSING",
           "NOT_DECODABLE", "OUTSIDE"]

_SOURCE = Path(__file__).parent / "_native" / "zarr_chunks.c"

MISSING = 1  # the chunk file does not exist: zarr's fill value
NOT_DECODABLE = 3
OUTSIDE = 5  # the path resolves outside the store (or through an absolute symlink): judged by
# the caller (`_paths.Confined`)
# status codes of chute_read_chunks (zarr_chunks.c) -> what went wrong
CHUNK_ERRORS = {
    2: "cannot be read (I/O error)",
    NOT_DECODABLE: "does not decompress (corrupt, or larger than a chunk)",
    4: "does not hold exactly one chunk's bytes",
    6: "is not a regular file (a FIFO, a folder or a device)",
}


class _Api(ctypes.Structure):
    _fields_ = [("create_dctx", ctypes.c_void_p), ("decompress_dctx", ctypes.c_void_p),
                ("is_error", ctypes.c_void_p), ("free_dctx", ctypes.c_void_p)]


class _Store(ctypes.Structure):  # struct store of zarr_chunks.c
    _fields_ = [("root_fd", ctypes.c_int), ("beneath", ctypes.c_int),
                ("root", ctypes.c_char_p), ("real_root", ctypes.c_char_p)]


# whether batches of one-row chunks are read by the C shim (else chunk by chunk)
ChunkReaderStatus = ShimStatus


def _load() -> tuple:
    zstd = decoder()
    if zstd is None:
        raise BackendUnavailableError("no libzstd exporting ZSTD_decompressDCtx was found")

    def address(name: str) -> int | None:
        return ctypes.cast(getattr(zstd.lib, name), ctypes.c_void_p).value

    api = _Api(address("ZSTD_createDCtx"), address("ZSTD_decompressDCtx"),
               address("ZSTD_isError"), address("ZSTD_freeDCtx"))
    path, function = load_function(
        _SOURCE, "chute_read_chunks", ctypes.c_int64,
        [ctypes.POINTER(_Api), ctypes.c_int, ctypes.POINTER(_Store), ctypes.c_char_p,
         ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.c_size_t, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p],
        "chute's zarr chunk reader", "zarr chunks are read one by one in Python (slower)")
    return path, (function, api)


_shim = NativeShim(_load, (BackendUnavailableError, AttributeError))  # loaded: (function, api)


def chunk_reader_status() -> ShimStatus:
    """Builds (once per machine) and loads (once per process) the shim on the first call;
    never raises."""
    return _shim.status()


def read_chunks(compressed: bool, dests: np.ndarray, nbytes: int,
                pool: ThreadPoolExecutor | ProcessPool, workers: int, *,
                store: Confined | None = None, prefix: str | None = None,
                suffix: str = "", chunks: np.ndarray | None = None,
                sources: list | None = None) -> np.ndarray:
    """Status (int32 [n]: 0, MISSING, OUTSIDE or a CHUNK_ERRORS code) of decompressing chunk k into
    the `nbytes` at address dests[k], for every k, by `workers` threads (this one and
    `workers - 1` of `pool`). Call `chunk_reader_status()` first.

    Args:
        compressed: zstd frames (else the chunks are the bytes themselves).
        dests: uintp [n] addresses of the destinations (`nbytes` each, disjoint).
        nbytes: bytes of one decoded chunk.
        pool: where the other workers run.
        workers: threads working on the batch together.
        store, prefix, suffix, chunks: chunk k is the file `prefix + str(chunks[k]) + suffix`
            of `store` (prefix relative to it).
        sources: or chunk k is the bytes-like sources[k], already in memory.
    """
    function, api = _shim.loaded
    n = len(dests)
    status = np.zeros(n, np.int32)
    counter = np.zeros(1, np.int64)
    dests = np.ascontiguousarray(dests, np.uintp)
    if sources is not None:
        arrays = [np.frombuffer(s, np.uint8) for s in sources]
        pointers = np.asarray([a.ctypes.data for a in arrays], np.uintp)
        sizes = np.asarray([a.size for a in arrays], np.uintp)
        args: tuple = (None, None, b"", None, pointers.ctypes.data, sizes.ctypes.data)
    else:
        assert store is not None and prefix is not None  # the files' way needs both
        chunks = np.ascontiguousarray(chunks, np.int64)
        where = _Store(store.dir_fd(), int(available()), os.fsencode(store.root),
                       os.fsencode(store.real.rstrip(os.sep) + os.sep))
        args = (ctypes.byref(where), os.fsencode(prefix), os.fsencode(suffix),
                chunks.ctypes.data, None, None)

    def work() -> int:
        return function(ctypes.byref(api), int(compressed), *args, dests.ctypes.data, nbytes,
                        n, counter.ctypes.data, status.ctypes.data)

    others = [pool.submit(work) for _ in range(min(workers, n) - 1)]
    work()
    for other in others:
        other.result()
    return status
