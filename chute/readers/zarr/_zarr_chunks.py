"""Direct chunk reads of simple zarr arrays: the chunk files are read and decompressed here, on
a thread pool (numcodecs' zstd and blosc release the GIL), bypassing zarr's per-call indexing
machinery, which costs milliseconds per chunk (docs/design.md, "Zarr groups").

Simple means: a local store, chunks spanning every dimension but the first, no filters, and
at most one compressor (v2: `compressor`, any numcodecs one; v3: `bytes` little-endian then
`zstd`/`blosc`). Anything else (sharded v3 arrays, other codecs) returns None from `plan` and
is read through zarr itself.

A chunk file that is absent is a `MissingChunk` (its rows fail, as a corrupt chunk's do) unless
the array was opened with `missing_chunks="fill"` (docs/latents.md, "Missing chunks"). Chunks
of more than one row are kept decoded in a per-process `ChunkCache`, so the batches that share a
chunk decode it once.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chute._fork import ProcessPool, ReusePool
from chute.errors import FormatError
from chute.readers.storage._paths import Confined, LeadsOutside
from chute.readers.zarr._zstd_native import decoder

MAX_CHUNK_BYTES = 1 << 31  # as `_zarr.MAX_CHUNK_BYTES` (a decoded chunk chute reads)
_LZMA_MEMORY = 128 << 20

__all__ = ["ChunkCache", "ChunkPlan", "MissingChunk", "missing_message", "plan", "read_rows",
           "read_threads"]

_LOCAL = threading.local()  # per-thread read buffer: a fresh large allocation per chunk costs
# page faults comparable to decompressing it


def read_threads() -> int:
    """Threads that read and decompress chunks (one per core, at most 8)."""
    return min(8, os.cpu_count() or 1)


_POOL = ProcessPool(read_threads(), "chute-zarr")  # made anew in each process


def _pool() -> ProcessPool:
    return _POOL


class MissingChunk(FormatError):
    """A chunk (or shard) file of an array opened with missing_chunks="error" is absent."""


def missing_message(file: str, chunk: int, where: str) -> str:
    """The one-line message of a missing chunk `chunk` (file `file`) of `where`."""
    return (f"{file}: chunk {chunk} of {where} is missing (its rows would read as zarr's fill "
            "value); restore the store, or, if the array was written sparse on purpose (zarr "
            "skips chunks equal to the fill value), open it with missing_chunks='fill'")


class ChunkCache:
    """Decoded chunks of a store's arrays in one process, least recently used dropped beyond
    `limit` bytes (thread-safe): rows of one chunk spread over several batches (sequential
    reads smaller than a chunk, a substitute, a chunk-window order) decode it once.

    Attributes:
        limit: bytes kept at most. decoded: chunks decoded into the cache (for measurements).
    """

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.decoded = 0
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._bytes = 0

    def get(self, field: str, chunk: int) -> np.ndarray | None:
        with self._lock:
            data = self._chunks.get((field, chunk))
            if data is not None:
                self._chunks.move_to_end((field, chunk))
            return data

    def put(self, field: str, chunk: int, data: np.ndarray) -> None:
        """Keep `data` (read-only; the caller's own copy) unless it alone exceeds the limit."""
        if data.nbytes > self.limit:
            return
        data.flags.writeable = False
        with self._lock:
            self.decoded += 1
            old = self._chunks.pop((field, chunk), None)
            self._bytes -= 0 if old is None else old.nbytes
            self._chunks[(field, chunk)] = data
            self._bytes += data.nbytes
            while self._bytes > self.limit:
                _, dropped = self._chunks.popitem(last=False)
                self._bytes -= dropped.nbytes


@dataclass(frozen=True)
class ChunkPlan:
    folder: Path  # the array's, for messages
    confined: Confined  # the store: chunk files are opened only inside it
    field: str  # the array's folder, relative to the store
    rows: int  # samples per chunk
    inner: tuple[int, ...]
    dtype: np.dtype
    fill: object
    key: Callable[[int], str]
    decode: Callable[..., Any] | None  # (raw, out=None) -> the bytes; None: stored uncompressed
    nbytes: int = 0  # of one decoded chunk
    key_parts: tuple[str, str] | None = None  # chunk c's key is parts[0] + str(c) + parts[1]
    fill_missing: bool = False  # an absent chunk file reads as `fill` (else MissingChunk)

    def path(self, chunk: int) -> str:
        return f"{self.folder}{os.sep}{self.key(chunk)}"

    def relative(self, chunk: int) -> str:
        """The chunk file's path relative to the store."""
        return f"{self.field}/{self.key(chunk)}"


def _key_function(encode, zeros: tuple) -> tuple[Callable[[int], str], tuple | None]:
    """zarr's chunk key of chunk (c, 0, ...) as plain string formatting (zarr's own encoder
    and pathlib joins held the GIL for ~12 us a chunk, which two reading threads felt), and
    the (prefix, suffix) around c when that is what the key is."""
    marker = 987654321
    prefix, _, suffix = encode((marker, *zeros)).partition(str(marker))
    fast = (prefix + "{}" + suffix).format
    if all(fast(c) == encode((c, *zeros)) for c in (0, 7, 12, 123)):
        return fast, (prefix, suffix)
    return (lambda c: encode((c, *zeros))), None


def _v3_decoder(codecs):
    from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

    if not codecs or not isinstance(codecs[0], BytesCodec) or \
            getattr(codecs[0].endian, "value", "little") != "little":
        return False
    rest = codecs[1:]
    if not rest:
        return None
    if len(rest) == 1 and isinstance(rest[0], ZstdCodec) and not rest[0].checksum:
        return _zstd_decode
    if len(rest) == 1 and isinstance(rest[0], BloscCodec):
        return _blosc_decode
    if len(rest) == 1 and isinstance(rest[0], GzipCodec):
        return _bounded(_stream_decompressor("gzip"), "gzip")
    return False


_BLOSC_HEADER = 16


def _blosc_decode(raw, out=None):
    """A blosc frame decoded (into `out`) once its header agrees with the chunk: blosc takes
    the compressed size from the header and reads that many bytes, so a truncated or empty
    chunk -- a view into this thread's reused read buffer -- would decode the stale bytes after
    it (another chunk) without an error."""
    raw = memoryview(raw).cast("B")
    if len(raw) < _BLOSC_HEADER:
        raise ValueError(f"blosc: {len(raw)} bytes, shorter than a blosc header")
    decoded, stored = (int.from_bytes(raw[a:a + 4], "little") for a in (4, 12))
    if stored != len(raw):
        raise ValueError(f"blosc: the header gives {stored} compressed bytes, the chunk holds "
                         f"{len(raw)}")
    if out is not None and decoded != out.nbytes:
        return raw[:0]  # the wrong size, named by the caller
    if not hasattr(_LOCAL, "blosc"):
        import numcodecs

        _LOCAL.blosc = numcodecs.Blosc()
    return _LOCAL.blosc.decode(raw, out=out)


def _whole(codec):
    """`codec.decode` into a new buffer, then copied into `out`: a codec given `out` may leave
    it untouched for input that decodes to nothing (numcodecs' GZip does), where the new
    buffer's size shows it."""
    def decode(raw, out=None):
        data = np.frombuffer(codec.decode(raw), np.uint8)
        if out is None or data.size != out.nbytes:
            return data  # a wrong size is named by the caller
        flat = out.reshape(-1).view(np.uint8)
        flat[:] = data
        return flat
    return decode


def _stream_decompressor(codec_id: str, codec=None):
    """A new streaming decompressor of `codec_id` ("gzip", "zlib", "bz2", "lzma"), or None
    for a codec without one here."""
    if codec_id in ("gzip", "zlib"):
        import zlib

        wbits = 16 + zlib.MAX_WBITS if codec_id == "gzip" else zlib.MAX_WBITS
        return lambda: zlib.decompressobj(wbits=wbits)
    if codec_id == "bz2":
        import bz2

        return bz2.BZ2Decompressor
    if codec_id == "lzma":
        import lzma

        form = getattr(codec, "format", lzma.FORMAT_AUTO)
        filters = getattr(codec, "filters", None) if form == lzma.FORMAT_RAW else None
        if form == lzma.FORMAT_RAW:
            return lambda: lzma.LZMADecompressor(format=form, filters=filters)
        # a header may ask for a dictionary of gigabytes: bounded (preset 9 needs 65 MiB)
        return lambda: lzma.LZMADecompressor(format=form, memlimit=_LZMA_MEMORY)
    return None


def _bounded(make, codec_id: str):
    """Decode by streaming into at most one chunk's bytes (`out`'s size) plus one: a chunk
    that inflates beyond is refused before its output exists (issue 26 item 11: a 1 MiB gzip
    chunk inflating to 1 GiB cost gigabytes before the size check)."""
    def decode(raw, out=None):
        limit = out.nbytes if out is not None else MAX_CHUNK_BYTES
        d = make()
        data = d.decompress(memoryview(raw).cast("B"), limit + 1)
        if len(data) > limit:
            raise ValueError(f"{codec_id}: inflates beyond the chunk's {limit} bytes")
        if not d.eof:
            raise ValueError(f"{codec_id}: the stream is truncated")
        if d.unused_data:
            raise ValueError(f"{codec_id}: {len(d.unused_data)} bytes after the stream")
        if out is None or len(data) != out.nbytes:
            return np.frombuffer(data, np.uint8)  # a wrong size is named by the caller
        flat = out.reshape(-1).view(np.uint8)
        flat[:] = np.frombuffer(data, np.uint8)
        return flat
    return decode


def _zstd_decode(raw, out=None):
    """A zstd frame decoded into `out` (or a new buffer): by libzstd's one-shot call into
    `out` with this thread's context, GIL released (`readers/zarr/_zstd_native.py`), else by python-
    zstandard -- a stream reader writing into `out` (its one-shot `decompress` did not scale
    past one thread here, and numcodecs' Zstd, a new context per call, ran ~1.8x slower on
    160 KB chunks). Returns the bytes written; the caller checks the size."""
    native = decoder()
    if native is not None and out is not None:
        flat = out.reshape(-1).view(np.uint8)
        return flat[:native.decode(raw, len(raw), flat)]
    with _DECOMPRESSORS.lease() as d:
        return _zstandard_decode(d, raw, out)


def _new_decompressor():
    import zstandard

    return zstandard.ZstdDecompressor()


_DECOMPRESSORS = ReusePool(_new_decompressor)  # lent per call, not one per thread ever seen


def _zstandard_decode(d, raw, out):
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


def plan(array, store: Confined, field: str, fill_missing: bool = False) -> ChunkPlan | None:
    """How to read `array` (the folder `field` of `store`) chunks directly, or None when zarr
    must do it. `fill_missing`: absent chunk files read as the fill value (else they fail)."""
    meta = array.metadata
    shape, chunks = tuple(array.shape), tuple(array.chunks)
    if chunks[1:] != shape[1:] or np.dtype(array.dtype).byteorder == ">":
        return None
    if meta.zarr_format == 2:
        if meta.filters or meta.order != "C":
            return None
        codec = meta.compressor
        stream = None if codec is None else _stream_decompressor(codec.codec_id, codec)
        decode = None if codec is None else _zstd_decode if codec.codec_id == "zstd" else \
            _blosc_decode if codec.codec_id == "blosc" else \
            _bounded(stream, codec.codec_id) if stream is not None else _whole(codec)
    else:
        decode = _v3_decoder(tuple(meta.codecs))
        if decode is False:
            return None
    zeros = (0,) * (len(shape) - 1)
    dtype = np.dtype(array.dtype)
    key, parts = _key_function(meta.encode_chunk_key, zeros)
    nbytes = int(chunks[0]) * dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    return ChunkPlan(store.root / field, store, field, int(chunks[0]), shape[1:], dtype,
                     meta.fill_value, key, decode, nbytes, parts, fill_missing)


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's reused buffer for one decoded chunk (valid until its next chunk)."""
    buf = getattr(_LOCAL, "scratch", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _LOCAL.scratch = np.empty(nbytes, np.uint8)
    return buf[:nbytes]


def _load(p: ChunkPlan, chunk: int, where: str, dest: np.ndarray | None = None):
    """Chunk `chunk` as [rows, *inner] (decoded into `dest` when given: one row per chunk
    needs no extra copy; else into this thread's scratch buffer, valid until the thread's next
    chunk); None when the chunk was never written; FormatError when it does not decode to
    exactly that."""
    try:
        raw = _read(p.confined.open(p.relative(chunk), "a chunk of " + where),
                    dest if p.decode is None else None)
    except FileNotFoundError:
        return None  # never written: zarr's fill value
    try:
        if p.decode is None:
            data = raw  # in `dest`, or in the thread's read buffer
        else:
            data = p.decode(raw, out=dest if dest is not None else _scratch(p.nbytes))
    except Exception as exc:
        raise FormatError(f"{p.path(chunk)}: chunk {chunk} of {where} does not decode "
                          f"({type(exc).__name__}: {exc}); restore the store") from None
    flat = np.frombuffer(data, np.uint8)
    want = p.nbytes
    if flat.size != want:
        raise FormatError(f"{p.path(chunk)}: chunk {chunk} of {where} holds {flat.size} bytes, "
                          f"expected {want}; the chunk is corrupt")
    return flat.view(p.dtype).reshape(p.rows, *p.inner)


def _read(fd: int, dest: np.ndarray | None):
    """The bytes of the file open as `fd` (closed here): straight into `dest` when it is
    exactly that size, else into this thread's reused buffer (a view, valid until the
    thread's next read). os-level calls: a Python file object costs more than reading a 160 KB
    chunk from the page cache."""
    try:
        size = os.fstat(fd).st_size
        if dest is not None and dest.nbytes == size:
            # numpy's stubs give ndarray __buffer__ on Python >= 3.12 only
            target = memoryview(dest.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
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
              status: np.ndarray | None, cache: ChunkCache | None = None) -> None:
    """Rows `ids` into `out`: each touched chunk read and decompressed once, in parallel, by
    the thread that then writes its rows (rows of different chunks never overlap). Chunks of
    more than one row come from `cache` when it holds them, and go into it when decoded."""
    chunk_of = ids // p.rows
    direct = p.rows == 1 and out.flags.c_contiguous
    if direct and _native_batch(p):
        _read_native(p, chunk_of, out, where, status)
        return
    order = np.argsort(chunk_of, kind="stable")
    touched, starts = np.unique(chunk_of[order], return_index=True)
    groups = np.split(order, starts[1:])  # rows of each touched chunk, first one first
    if p.rows == 1:
        cache = None  # a one-row chunk is decoded straight into its row: nothing to share

    def one(k: int):
        rows, chunk = groups[k], int(touched[k])
        data = None if cache is None else cache.get(p.field, chunk)
        if data is not None:
            out[rows] = data[ids[rows] - chunk * p.rows]
            return None
        # a batch taking every row of the chunk (reading in order) leaves none for later
        # batches: decoded into the thread's scratch buffer, not kept
        keep = cache is not None and len(np.unique(ids[rows])) < p.rows
        dest = out[rows[0]:rows[0] + 1] if direct else \
            np.empty((p.rows, *p.inner), p.dtype) if keep else None
        try:
            data = _load(p, chunk, where, dest)
        except FormatError as exc:
            return exc
        if data is None:
            if not p.fill_missing:
                return MissingChunk(missing_message(p.path(chunk), chunk, where))
            out[rows] = p.fill if p.fill is not None else 0
        elif direct:
            out[rows[1:]] = out[rows[0]]  # repeats of a sample in the batch
        else:
            if keep and cache is not None:
                cache.put(p.field, chunk, data)  # `dest`: this call's own array
            out[rows] = data[ids[rows] - chunk * p.rows]
        return None

    for k, failed in enumerate(_pool().map(one, range(len(touched)))):
        if failed is not None:
            if status is None or isinstance(failed, LeadsOutside):
                raise failed
            status[groups[k]] = 1
            out[groups[k]] = 0


def _native_batch(p: ChunkPlan) -> bool:
    """Whether the C shim reads this array's one-row chunks (`readers/zarr/_chunk_native.py`)."""
    if p.key_parts is None or p.decode not in (None, _zstd_decode):
        return False
    from chute.readers.zarr._chunk_native import chunk_reader_status

    return chunk_reader_status().available


def _read_native(p: ChunkPlan, chunk_of: np.ndarray, out: np.ndarray, where: str,
                 status: np.ndarray | None) -> None:
    """One-row chunks `chunk_of` decompressed by the C shim into `out` (each distinct chunk
    once, into its first row), on every reading thread at once; repeats copied, missing chunks
    filled (missing_chunks="fill") or failed, failures named."""
    from chute.readers.zarr._chunk_native import (
        CHUNK_ERRORS,
        MISSING,
        NOT_DECODABLE,
        OUTSIDE,
        read_chunks,
    )

    assert p.key_parts is not None  # `_native_batch` said so
    touched, first, inverse = np.unique(chunk_of, return_index=True, return_inverse=True)
    dests = out.ctypes.data + first.astype(np.uintp) * np.uintp(out.strides[0])
    codes = read_chunks(p.decode is not None, dests, p.nbytes, _pool(), read_threads(),
                        store=p.confined, prefix=f"{p.field}/{p.key_parts[0]}",
                        suffix=p.key_parts[1], chunks=touched)
    for k in np.flatnonzero(codes == OUTSIDE).tolist():  # refused, or an absolute symlink
        row = int(first[k])  # that may lead back inside: `_load` decides, as for any chunk
        try:
            codes[k] = MISSING if _load(p, int(touched[k]), where, out[row:row + 1]) is None \
                else 0
        except LeadsOutside:
            raise
        except FormatError:
            codes[k] = NOT_DECODABLE
    if len(touched) < len(chunk_of):  # repeats of a sample in the batch
        source = first[inverse]
        repeats = np.flatnonzero(source != np.arange(len(chunk_of)))
        out[repeats] = out[source[repeats]]
    if p.fill_missing:
        missing = codes[inverse] == MISSING  # rows of chunks never written, all at once
        if missing.any():
            out[missing] = p.fill if p.fill is not None else 0
    failing = codes != 0
    if p.fill_missing:
        failing &= codes != MISSING
    for k in np.flatnonzero(failing).tolist():
        rows, code = np.flatnonzero(inverse == k), int(codes[k])
        chunk = int(touched[k])
        error = MissingChunk(missing_message(p.path(chunk), chunk, where)) \
            if code == MISSING else \
            FormatError(f"{p.path(chunk)}: chunk {chunk} of {where} "
                        f"{CHUNK_ERRORS.get(code, f'failed (code {code})')}; the chunk is "
                        "corrupt: restore the store")
        if status is None:
            raise error
        status[rows] = 1
        out[rows] = 0
