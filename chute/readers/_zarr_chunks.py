"""Direct chunk reads of simple zarr arrays: the chunk files are read and decompressed here, on
a thread pool (numcodecs' zstd and blosc release the GIL), bypassing zarr's per-call indexing
machinery, which costs milliseconds per chunk (docs/design.md, "Zarr groups").

Simple means: a local store, chunks spanning every dimension but the first, no filters, and
at most one compressor among zstd and blosc (v2: `compressor`; v3: `bytes` little-endian then
`zstd`/`blosc`). Anything else (sharded v3 arrays, other codecs) returns None from `plan` and
is read through zarr itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chute.errors import FormatError

__all__ = ["ChunkPlan", "plan", "read_rows"]

_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): one per process
_LOCAL = threading.local()  # per-thread read buffer: a fresh large allocation per chunk costs
# page faults comparable to decompressing it


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(min(8, os.cpu_count() or 1),
                                                 thread_name_prefix="chute-zarr"))
    return _POOL[1]


@dataclass(frozen=True)
class ChunkPlan:
    folder: Path
    rows: int  # samples per chunk
    inner: tuple[int, ...]
    dtype: np.dtype
    fill: object
    key: Callable[[int], str]
    decode: Callable[[bytes], object] | None  # None: stored uncompressed
    nbytes: int = 0  # of one decoded chunk

    def path(self, chunk: int) -> str:
        return f"{self.folder}{os.sep}{self.key(chunk)}"


def _key_function(encode, zeros: tuple) -> Callable[[int], str]:
    """zarr's chunk key of chunk (c, 0, ...) as plain string formatting: zarr's own encoder
    and pathlib joins held the GIL for ~12 us a chunk, which two reading threads felt."""
    marker = 987654321
    prefix, _, suffix = encode((marker, *zeros)).partition(str(marker))
    fast = (prefix + "{}" + suffix).format
    if all(fast(c) == encode((c, *zeros)) for c in (0, 7, 12, 123)):
        return fast
    return lambda c: encode((c, *zeros))


def _v3_decoder(codecs):
    from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

    if not codecs or not isinstance(codecs[0], BytesCodec) or \
            getattr(codecs[0].endian, "value", "little") != "little":
        return False
    rest = codecs[1:]
    if not rest:
        return None
    if len(rest) == 1 and isinstance(rest[0], ZstdCodec) and not rest[0].checksum:
        return _zstd_decode
    if len(rest) == 1 and isinstance(rest[0], BloscCodec):
        import numcodecs

        return numcodecs.Blosc().decode
    return False


def _zstd_decode(raw, out=None):
    """A zstd frame decoded by this thread's reused python-zstandard context. Into `out`, a
    stream reader writes straight into the destination and lets two threads decode in
    parallel (one-shot `decompress` did not scale past one thread here, and numcodecs' Zstd
    ran ~1.8x slower on 160 KB chunks); the caller checks the size."""
    d = getattr(_LOCAL, "zstd", None)
    if d is None:
        import zstandard

        d = _LOCAL.zstd = zstandard.ZstdDecompressor()
    if out is None:
        # frames without a content size need a bound
        return d.decompress(raw, max_output_size=1 << 31)
    flat = memoryview(out.reshape(-1).view(np.uint8))
    with d.stream_reader(raw) as reader:
        done = 0
        while done < len(flat):
            n = reader.readinto(flat[done:])
            if not n:
                break
            done += n
        extra = len(reader.read(1)) if done == len(flat) else 0
    return flat[:done] if not extra else bytes(done + extra)  # wrong sizes are named upstream


def plan(array, folder: Path) -> ChunkPlan | None:
    """How to read `array`'s chunks directly, or None when zarr must do it."""
    meta = array.metadata
    shape, chunks = tuple(array.shape), tuple(array.chunks)
    if chunks[1:] != shape[1:] or np.dtype(array.dtype).byteorder == ">":
        return None
    if meta.zarr_format == 2:
        if meta.filters or meta.order != "C":
            return None
        decode = None if meta.compressor is None else \
            _zstd_decode if meta.compressor.codec_id == "zstd" else meta.compressor.decode
    else:
        decode = _v3_decoder(tuple(meta.codecs))
        if decode is False:
            return None
    zeros = (0,) * (len(shape) - 1)
    dtype = np.dtype(array.dtype)
    return ChunkPlan(folder, int(chunks[0]), shape[1:], dtype, meta.fill_value,
                     _key_function(meta.encode_chunk_key, zeros), decode,
                     int(chunks[0]) * dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64)))


def _load(p: ChunkPlan, chunk: int, where: str, dest: np.ndarray | None = None):
    """Chunk `chunk` as [rows, *inner] (decoded into `dest` when given: one row per chunk
    needs no extra copy); None when the chunk was never written; FormatError when it does not
    decode to exactly that."""
    path = p.path(chunk)
    try:
        raw = _read(path, dest if p.decode is None else None)
    except FileNotFoundError:
        return None  # never written: zarr's fill value
    try:
        if p.decode is None:
            # read into `dest`, or a copy: the thread's buffer is reused by its next read
            data = raw if dest is not None else bytes(raw)
        elif dest is not None:
            data = p.decode(raw, out=dest)
        else:
            data = p.decode(raw)
    except Exception as exc:
        raise FormatError(f"{path}: chunk {chunk} of {where} does not decode "
                          f"({type(exc).__name__}: {exc}); restore the store") from None
    flat = np.frombuffer(data, np.uint8)
    want = p.nbytes
    if flat.size != want:
        raise FormatError(f"{path}: chunk {chunk} of {where} holds {flat.size} bytes, expected "
                          f"{want}; the chunk is corrupt")
    return flat.view(p.dtype).reshape(p.rows, *p.inner)


def _read(path: str, dest: np.ndarray | None):
    """The file's bytes: straight into `dest` when it is exactly that size, else into this
    thread's reused buffer (a view, valid until the thread's next read). os-level calls: a
    Python file object costs more than reading a 160 KB chunk from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if dest is not None and dest.nbytes == size:
            target = memoryview(dest.reshape(-1).view(np.uint8))
        else:
            buf = getattr(_LOCAL, "buf", None)
            if buf is None or len(buf) < size:
                buf = _LOCAL.buf = bytearray(max(size, 1 << 20))
            target = memoryview(buf)[:size]
        done = 0
        while done < size:
            n = os.preadv(fd, [target[done:]], done)
            if not n:
                break
            done += n
    finally:
        os.close(fd)
    return target[:done]


def read_rows(p: ChunkPlan, ids: np.ndarray, out: np.ndarray, where: str,
              status: np.ndarray | None) -> None:
    """Rows `ids` into `out`: each touched chunk read and decompressed once, in parallel."""
    chunk_of = ids // p.rows
    touched, first = np.unique(chunk_of, return_index=True)
    direct = p.rows == 1 and out.flags.c_contiguous

    def one(k: int):
        dest = out[first[k]:first[k] + 1] if direct else None  # a view, also for 1-D out
        try:
            return _load(p, int(touched[k]), where, dest)
        except FormatError as exc:
            return exc

    for k, data in enumerate(_pool().map(one, range(len(touched)))):
        chunk = int(touched[k])
        rows = np.flatnonzero(chunk_of == chunk)
        if isinstance(data, FormatError):
            if status is None:
                raise data
            status[rows] = 1
            out[rows] = 0
        elif data is None:
            out[rows] = p.fill if p.fill is not None else 0
        elif direct:
            out[rows[1:]] = out[first[k]]  # repeats of a sample in the batch
        else:
            out[rows] = data[ids[rows] - chunk * p.rows]
