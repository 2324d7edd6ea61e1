"""Kind `ndarray`: per-sample NumPy arrays of one dtype (precomputed latents, embeddings).

Fixed shape: every sample has the field's shape; stored raw, back to back, so a shard's `.bin`
is one `[n, *shape]` array viewed without a copy and a batch is one `take` per shard.
Ragged (`ragged=True`): the leading dimension varies; `<stem>.rows.npy` holds it per sample and
a batch is padded with zeros to its longest sample. `compression="zstd"` compresses each sample
on its own (random access stays O(1)); a record that does not decompress to its exact size is
reported, never returned (docs/design.md, "Field kinds").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chute._fork import ReusePool
from chute.errors import FormatError
from chute.readers.format._records import Records, RecordWriter, as_bytes, load_records
from chute.readers.kinds._kind import Encoded, OpenArgs
from chute.readers.kinds._kind_scalar import load_column, save_column
from chute.readers.storage._shard_files import LazyBins

__all__ = ["NDARRAY", "NdarrayReader"]

_COMPRESSIONS = (None, "zstd")
_OPTIONS = {"dtype", "shape", "ragged", "compression", "level"}
_MAX_SAMPLE_BYTES = 1 << 40  # a row size no real sample reaches; keeps offsets in int64
_MAX_ZSTD_RATIO = 1 << 16  # decompressed / compressed bytes of a zstd frame, with slack
_ZSTD_BLOCK = 1 << 17  # a zstd block's largest content


def _zstd():
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a declared dependency
        raise FormatError("zstd-compressed ndarray fields need the `zstandard` package: "
                          "pip install zstandard") from None
    return zstandard


# shared by every reader: one per thread and reader added up over Pipelines and threads
_DECOMPRESSORS = ReusePool(lambda: _zstd().ZstdDecompressor())


class NdarrayReader:
    """Reads one ndarray field. `sample_shape` is the per-sample shape; for a ragged field its
    leading entry is the longest sample of the dataset."""

    def __init__(self, args: OpenArgs, records: Records, rows: np.ndarray | None):
        spec = args.spec
        self.field = args.field
        self.dtype = np.dtype(spec["dtype"])
        self.inner = tuple(int(d) for d in spec["shape"][1:]) if rows is not None else \
            tuple(int(d) for d in spec["shape"])
        self.records = records
        self.rows = rows  # int64 [N] leading dims (ragged) or None
        self.compressed = spec.get("compression") == "zstd"
        lead = (int(rows.max()) if rows is not None and rows.size else 0,) \
            if rows is not None else ()
        self.sample_shape = lead + self.inner
        self._row_bytes = self.dtype.itemsize * math.prod(self.inner)
        self._arrays = None if self.compressed or rows is not None else self._fixed_views(args)

    def _expected_bytes(self, ids: np.ndarray) -> np.ndarray:
        if self.rows is None:
            return np.full(len(ids), self._row_bytes, np.int64)
        return self.rows[ids] * self._row_bytes

    def _fixed_views(self, args: OpenArgs) -> Sequence[np.ndarray]:
        """Each shard's .bin as one [n, *shape] array (zero-copy), after checking that the
        index describes back-to-back records of exactly one sample each. A remote dataset's
        shards are mapped when first used (`_ShardArrays`)."""
        for k, count in enumerate(args.counts):
            lo, hi = int(self.records.starts[k]), int(self.records.starts[k + 1])
            pointers, lengths = self.records.pointers[lo:hi], self.records.lengths[lo:hi]
            expected = np.arange(count, dtype=np.int64) * self._row_bytes
            if (lengths != self._row_bytes).any() or (pointers != expected).any():
                raise FormatError(f"{self.records.paths[k]}: records are not {self._row_bytes}"
                                  f"-byte {self.dtype.name} {list(self.inner)} arrays back to "
                                  "back as the manifest says; the shard is corrupt or from "
                                  "another writer")
        arrays = _ShardArrays(self.records.bins, list(args.counts), self._row_bytes,
                              self.dtype, self.inner)
        return arrays if isinstance(self.records.bins, LazyBins) else list(arrays)

    def _decode(self, raw: np.ndarray, global_id: int, nbytes: int) -> np.ndarray:
        """Record -> flat array of the sample; FormatError when it is not exactly that."""
        if self.compressed:
            try:
                # a decompressor is not thread-safe: each call borrows one from the pool
                with _DECOMPRESSORS.lease() as decompressor:
                    # frames carry a content checksum (checked here); nothing may follow them
                    raw = np.frombuffer(decompressor.decompress(
                        raw, max_output_size=max(nbytes, 1), allow_extra_data=False), np.uint8)
            except _zstd().ZstdError as exc:
                raise FormatError(f"{self.records.where(global_id)} of field {self.field!r} "
                                  f"does not decompress ({exc}); run `chute verify`") from None
        if raw.size != nbytes:
            raise FormatError(f"{self.records.where(global_id)} of field {self.field!r} holds "
                              f"{raw.size} bytes, expected {nbytes}; run `chute verify`")
        return raw.view(self.dtype)

    def get(self, shard: int, local: int, global_id: int) -> np.ndarray:
        if self._arrays is not None:
            return self._arrays[shard][local]
        nbytes = int(self._expected_bytes(np.array([global_id]))[0])
        flat = self._decode(self.records.view(shard, global_id), global_id, nbytes)
        lead = (int(self.rows[global_id]),) if self.rows is not None else ()
        return flat.reshape(lead + self.inner)

    def lengths(self, ids: np.ndarray) -> np.ndarray | None:
        """Leading dimension of each sample of `ids` (ragged fields), else None."""
        return None if self.rows is None else self.rows[ids]

    def read(self, ids: np.ndarray, out: np.ndarray | None = None,
             status: np.ndarray | None = None) -> np.ndarray:
        """Samples `ids` into `out` ([B, *shape]; ragged: [B, L >= longest, *inner], zero
        padded), allocated when None. With `status` (uint8 [B]) a corrupt record marks its row
        non-zero instead of raising."""
        ids = np.asarray(ids, dtype=np.int64)
        if out is None:
            lead = (int(self.rows[ids].max()) if len(ids) else 0,) if self.rows is not None \
                else ()
            out = np.empty((len(ids), *lead, *self.inner), self.dtype)
        if self._arrays is not None:
            self._take(self._arrays, ids, out)
            return out
        if self.compressed and self.rows is None and len(ids) > 1 and \
                out.flags.c_contiguous and self._read_native(ids, out, status):
            return out
        lengths = self.lengths(ids)
        nbytes = self._expected_bytes(ids)
        for row, (raw, gid) in enumerate(zip(self.records.views(ids), ids.tolist(),
                                             strict=True)):
            try:
                flat = self._decode(raw, gid, int(nbytes[row]))
            except FormatError:
                if status is None:
                    raise
                status[row] = 1
                out[row] = 0
                continue
            if lengths is None:
                out[row] = flat.reshape(self.inner)
            else:
                n = int(lengths[row])
                out[row, :n] = flat.reshape((n, *self.inner))
                out[row, n:] = 0
        return out

    def _read_native(self, ids: np.ndarray, out: np.ndarray,
                     status: np.ndarray | None) -> bool:
        """Fixed-shape zstd records decompressed straight into their rows of `out` by libzstd
        (content checksums checked), on every chunk-reading thread at once without the GIL
        (`readers/zarr/_chunk_native.py`); False when the shim is unavailable (then record by
        record)."""
        from chute.readers.zarr._chunk_native import chunk_reader_status, read_chunks
        from chute.readers.zarr._zarr_chunks import _pool, read_threads

        if not chunk_reader_status().available:
            return False
        dests = out.ctypes.data + np.arange(len(ids), dtype=np.uintp) * np.uintp(out.strides[0])
        codes = read_chunks(True, dests, self._row_bytes, _pool(), read_threads(),
                            sources=self.records.views(ids))
        for row in np.flatnonzero(codes).tolist():
            if status is None:
                raise FormatError(f"{self.records.where(int(ids[row]))} of field "
                                  f"{self.field!r} does not decompress to exactly its "
                                  f"{self._row_bytes} bytes; run `chute verify`")
            status[row] = 1
            out[row] = 0
        return True

    def _take(self, arrays: Sequence[np.ndarray], ids: np.ndarray, out: np.ndarray) -> None:
        if len(arrays) == 1:
            np.take(arrays[0], ids, axis=0, out=out)
            return
        starts = self.records.starts
        shards = self.records.shard_of(ids)
        for k in np.unique(shards).tolist():
            rows = np.flatnonzero(shards == k)
            out[rows] = np.take(arrays[k], ids[rows] - starts[k], axis=0)



class _ShardArrays(Sequence):
    """Shard k's .bin viewed as [count, *inner] (mapped on access for lazy shards)."""

    def __init__(self, bins: Sequence[np.ndarray], counts: list[int], row_bytes: int,
                 dtype: np.dtype, inner: tuple[int, ...]):
        self._bins, self._counts = bins, counts
        self._row_bytes, self._dtype, self._inner = row_bytes, dtype, inner

    def __len__(self) -> int:
        return len(self._counts)

    def __getitem__(self, k):
        count = self._counts[k]
        data = self._bins[k][:count * self._row_bytes]
        return data.view(self._dtype).reshape(count, *self._inner)


def _check_rows(reader: NdarrayReader, args: OpenArgs) -> None:
    """A ragged field's lengths agree with its records: all of them when stored raw (a
    comparison of two columns), the longest one when compressed (its frame header). The
    longest sample sizes every batch buffer, so a corrupt length must not get that far."""
    rows, records, row_bytes = reader.rows, reader.records, reader._row_bytes
    assert rows is not None  # a ragged field's
    wrong: list[int] | np.ndarray
    longest = int(rows.argmax())
    if int(rows[longest]) > _MAX_SAMPLE_BYTES // max(row_bytes, 1):
        wrong = [longest]  # more bytes than any record holds (and rows * size would wrap)
    elif not reader.compressed:
        wrong = np.flatnonzero(rows * row_bytes != records.lengths)
    else:
        # a zstd frame inflates by at most ~2^15 (a 4-byte RLE block per 128 KiB): a length
        # beyond that is claimed, not stored (a frame without a declared size told nothing)
        claimed = np.flatnonzero(rows * row_bytes > records.lengths.astype(np.int64) *
                                 _MAX_ZSTD_RATIO + _ZSTD_BLOCK)
        size = _content_size(records, longest)
        wrong = claimed[:1] if len(claimed) else \
            [] if size in (-1, int(rows[longest]) * row_bytes) else [longest]
    if len(wrong):
        i = int(wrong[0])
        shard = int(records.shard_of(np.array([i]))[0])
        raise FormatError(f"{args.folders[shard] / args.stem}.rows.npy: sample {i} has length "
                          f"{int(rows[i])}, which its record ({records.where(i)}) does not "
                          "hold; the column or the record is corrupt: run `chute verify`")


def _content_size(records: Records, i: int) -> int | None:
    """The decompressed size a zstd record's frame header declares (-1: not declared), None
    when it is not a zstd frame."""
    shard = int(records.shard_of(np.array([i]))[0])
    try:
        return _zstd().frame_content_size(records.view(shard, i))
    except _zstd().ZstdError:
        return None


class _RaggedColumn:
    """Records plus the per-sample leading dimension."""

    def __init__(self, folder: Path, stem: str, ragged: bool):
        self.records = RecordWriter(folder, stem)
        self.rows_path = folder / f"{stem}.rows.npy" if ragged else None
        self.rows: list[int] = []

    def add(self, encoded: Encoded) -> None:
        data, rows = encoded.data
        self.records.add(data)
        self.rows.append(rows)

    def commit(self) -> dict[str, dict]:
        files = self.records.commit()
        if self.rows_path is not None:
            files[self.rows_path.name] = save_column(self.rows_path, self.rows, "<i8")
        return files

    def abort(self) -> None:
        self.records.abort()


def _numeric_dtype(field: str, dtype) -> str:
    """A little-endian numeric dtype string, or a ValueError naming the field."""
    try:
        found = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"field {field!r}: {dtype!r} is not a NumPy dtype") from None
    if found.kind not in "biufc":
        raise ValueError(f"field {field!r}: an ndarray field holds numbers, got {found}")
    return found.newbyteorder("<").str


def _shape(field: str, shape, ragged: bool) -> list:
    """A JSON-ready shape (plain ints; the varying leading dimension None when ragged)."""
    try:
        dims = [None if d is None else int(d) for d in shape]
    except (TypeError, ValueError):
        raise ValueError(f"field {field!r}: shape must be a sequence of ints, got "
                         f"{shape!r}") from None
    if any(d is not None and d < 0 for d in dims) or (ragged and not dims):
        raise ValueError(f"field {field!r}: shape {shape!r} is not a valid array shape")
    if ragged:
        dims[0] = None
    return dims


def _shape_text(shape) -> str:
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"


class _NdarrayKind:
    name = "ndarray"

    def declare(self, field: str, options: dict) -> dict:
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ValueError(f"field {field!r}: unknown ndarray options {unknown}; it accepts "
                             f"{sorted(_OPTIONS)}")
        compression = options.get("compression")
        if compression not in _COMPRESSIONS:
            raise ValueError(f"field {field!r}: compression must be None or 'zstd', got "
                             f"{compression!r}")
        spec: dict[str, Any] = {"kind": self.name, "ragged": bool(options.get("ragged", False)),
                "compression": compression}
        if compression:
            level = int(options.get("level", 3))
            if not -7 <= level <= 22:
                raise ValueError(f"field {field!r}: zstd level must be in [-7, 22], got {level}")
            spec["level"] = level
        if options.get("dtype") is not None:
            spec["dtype"] = _numeric_dtype(field, options["dtype"])
        if options.get("shape") is not None:
            spec["shape"] = _shape(field, options["shape"], spec["ragged"])
        return spec

    def infer(self, value) -> dict | None:
        if isinstance(value, np.ndarray) and value.ndim != 0 and value.dtype != np.uint8 \
                and value.dtype.kind in "biufc":
            return {"kind": self.name}
        return None

    def complete(self, field: str, spec: dict, value) -> dict:
        array = np.asarray(value)
        spec = dict(spec)
        if "dtype" not in spec:
            spec["dtype"] = _numeric_dtype(field, array.dtype)
        if "shape" not in spec:
            if spec["ragged"] and array.ndim == 0:
                raise ValueError(f"field {field!r}: a ragged ndarray needs at least one "
                                 "dimension (the one that varies)")
            spec["shape"] = _shape(field, array.shape, spec["ragged"])
        return spec

    def check(self, field: str, spec: dict) -> str | None:
        try:
            dtype = np.dtype(spec["dtype"])
            if dtype.kind not in "biufc" or dtype.byteorder == ">":
                raise ValueError
            if not isinstance(spec["shape"], list):
                raise ValueError
            shape = spec["shape"]
            inner = shape[1:] if spec.get("ragged") else shape
            if not all(isinstance(d, int) and d >= 0 for d in inner) or \
                    math.prod(inner) * dtype.itemsize >= _MAX_SAMPLE_BYTES:
                raise ValueError
        except (KeyError, TypeError, ValueError):
            return f"field {field!r} needs a valid dtype and shape (has {spec})"
        if spec.get("compression") not in _COMPRESSIONS:
            return f"field {field!r} has unknown compression {spec.get('compression')!r}"
        return None

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        files = {f"{stem}.bin": "payload", f"{stem}.idx": "index"}
        if spec.get("ragged"):
            files[f"{stem}.rows.npy"] = "columns"
        return files

    def encode(self, field: str, spec: dict, value, sample: int) -> Encoded:
        array = np.asarray(value)
        dtype = np.dtype(spec["dtype"])
        shape = spec["shape"]
        if array.dtype.newbyteorder("<") != dtype.newbyteorder("<"):
            raise ValueError(f"sample {sample} field {field!r}: dtype {array.dtype} differs "
                             f"from the field's {dtype.name} (set by the first sample); convert "
                             f"it with .astype({dtype.name!r})")
        ragged = spec.get("ragged")
        expected = tuple(shape[1:]) if ragged else tuple(shape)
        got = array.shape[1:] if ragged else array.shape
        if (ragged and array.ndim == 0) or tuple(got) != expected:
            raise ValueError(f"sample {sample} field {field!r}: shape {list(array.shape)} does "
                             f"not match the field's {_shape_text(shape)}; every sample needs "
                             "that shape" + (" (the first dimension may vary)" if ragged else ""))
        data = as_bytes(np.ascontiguousarray(array, dtype=dtype))
        if spec.get("compression") == "zstd":
            data = _zstd().ZstdCompressor(level=spec.get("level", 3),
                                          write_checksum=True).compress(data)
        RecordWriter.check_length(field, sample, len(data))
        return Encoded((data, array.shape[0] if ragged else 0), len(data))

    def writer(self, folder: Path, stem: str, spec: dict) -> _RaggedColumn:
        return _RaggedColumn(folder, stem, bool(spec.get("ragged")))

    def open(self, args: OpenArgs) -> NdarrayReader:
        records = load_records(args.folders, args.stem, args.counts, args.trailing_index_ok,
                               args.files)
        rows = None
        if args.spec.get("ragged"):
            parts = [load_column(folder / f"{args.stem}.rows.npy", count, "<i8")
                     for folder, count in zip(args.folders, args.counts, strict=True)]
            rows = np.concatenate(parts) if parts else np.empty(0, np.int64)
            if rows.size and rows.min() < 0:
                raise FormatError(f"{args.folders[0] / args.stem}.rows.npy: negative lengths; "
                                  "the column is corrupt")
        reader = NdarrayReader(args, records, rows)
        if rows is not None and rows.size:
            _check_rows(reader, args)
        return reader

    def describe(self, spec: dict) -> str:
        text = f"{self.name} {np.dtype(spec['dtype']).name} {_shape_text(spec['shape'])}"
        return text + (f" {spec['compression']}" if spec.get("compression") else "")


NDARRAY = _NdarrayKind()
