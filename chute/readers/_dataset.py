"""Dataset: O(1) random access into memory-mapped shards, and the batch gather decoders consume."""

from __future__ import annotations

import bisect
import json
import mmap
import os
from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers._errors import SampleIndexError
from chute.readers._layout import Layout, resolve_layout
from chute.readers._mmidx import read_index

__all__ = ["Dataset", "open_dataset"]

_EMPTY = np.empty(0, np.uint8)


def open_dataset(path, *, bytes_field: str = "data") -> Dataset:
    """Open a chute dataset folder (or its chute.json), or a Megatron-LM / TouchDataset pair
    given as PREFIX, PREFIX.bin or PREFIX.idx. A Megatron pair has one bytes field, named
    `bytes_field` ("data" unless told otherwise, e.g. "image" for a pair of encoded images)."""
    return Dataset(path, bytes_field=bytes_field)


def _map_file(path: Path) -> np.ndarray:
    """Read-only uint8 view of a whole file (zero-copy)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return _EMPTY
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)


def _check_sizes(layout: Layout) -> None:
    for path, size in layout.expected_sizes.items():
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise FormatError(f"{path}: missing (listed in {layout.root}/chute.json); restore "
                              "the shard or re-convert the dataset") from None
        if actual != size:
            raise FormatError(f"{path}: is {actual} bytes but the manifest says {size}; the "
                              "file is truncated or was modified; restore it or re-convert")


class _Records:
    """One bytes/json field over all shards: per-shard mapped .bin, global pointers/lengths."""

    def __init__(self, bins: list[np.ndarray], pointers: np.ndarray, lengths: np.ndarray):
        self.bins = bins
        self.pointers = pointers  # int64 [N], byte offset inside the sample's shard .bin
        self.lengths = lengths  # int64 [N], bytes


def _load_records(paths: list[tuple[Path, Path]], counts: list[int], trailing_ok: bool):
    bins, pointers, lengths = [], [], []
    for (bin_path, idx_path), count in zip(paths, counts, strict=True):
        index = read_index(idx_path, trailing_ok=trailing_ok)
        if len(index.lengths) != count:
            raise FormatError(f"{idx_path}: holds {len(index.lengths)} samples but the manifest "
                              f"says {count}; the index does not belong to this manifest")
        try:
            data = _map_file(bin_path)
        except FileNotFoundError:
            raise FormatError(f"{bin_path}: missing; restore the shard or re-convert") from None
        nbytes = index.byte_lengths()
        if count and (index.lengths.min() < 0 or index.pointers.min() < 0
                      or int((index.pointers + nbytes).max()) > data.size):
            raise FormatError(f"{bin_path}: its index {idx_path.name} points past the end of "
                              f"its {data.size} bytes; the .bin is truncated or the pair "
                              "does not belong together")
        bins.append(data)
        pointers.append(index.pointers.astype(np.int64, copy=False))
        lengths.append(nbytes)
    empty = np.empty(0, np.int64)
    return _Records(bins, np.concatenate(pointers) if pointers else empty,
                    np.concatenate(lengths) if lengths else empty)


def _load_column(path: Path, count: int, dtype: str | None) -> np.ndarray:
    try:
        column = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise FormatError(f"{path}: missing; restore the shard or re-convert") from None
    except (ValueError, OSError) as exc:
        raise FormatError(f"{path}: not a readable .npy column ({exc})") from None
    if column.ndim != 1 or len(column) != count:
        raise FormatError(f"{path}: has shape {column.shape} but the manifest says {count} "
                          "samples; the column does not belong to this manifest")
    if dtype is not None and column.dtype != np.dtype(dtype):
        raise FormatError(f"{path}: dtype {column.dtype} but the manifest says {dtype}")
    return column


class Dataset:
    """A chute dataset opened for reading; see `open_dataset`. Picklable: the copy reopens the
    memory maps (cheap: only the manifest, indices and column headers are read)."""

    def __init__(self, path, *, bytes_field: str = "data"):
        self._source = str(path)
        self._bytes_field = bytes_field
        layout = resolve_layout(path, bytes_field)
        _check_sizes(layout)
        self.path: Path = layout.root
        self.manifest: dict = layout.manifest
        self.fingerprint: str = layout.fingerprint
        self.class_names: list[str] | None = layout.manifest.get("class_names")
        specs = layout.manifest["fields"]
        self.fields: dict[str, str] = {name: spec["kind"] for name, spec in specs.items()}
        shards = layout.manifest["shards"]
        counts = [s["num_samples"] for s in shards]
        self._names = [s["name"] for s in shards]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._starts_list = self._starts.tolist()
        self._len = int(self._starts[-1])
        self._records: dict[str, _Records] = {}
        self._columns: dict[str, list[np.ndarray]] = {}
        self._column_cache: dict[str, np.ndarray] = {}
        for name, kind in self.fields.items():
            paths = [files[name] for files in layout.shard_files]
            if kind == "scalar":
                self._columns[name] = [_load_column(p[0], c, specs[name].get("dtype"))
                                       for p, c in zip(paths, counts, strict=True)]
            else:
                self._records[name] = _load_records(paths, counts, layout.trailing_index_ok)

    def __reduce__(self):
        return (_reopen, (self._source, self._bytes_field))

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}:{k}" for n, k in self.fields.items())
        return f"<chute Dataset {self.path} samples={self._len} shards={len(self._names)} {fields}>"

    # -- single samples -------------------------------------------------------------------
    def _shard_of(self, i) -> tuple[int, int]:
        try:
            i = int(i)
        except (TypeError, ValueError):
            raise TypeError(f"sample index must be an integer, got {i!r}") from None
        given = i
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise SampleIndexError(f"sample {given} is out of range for {self.path} "
                                   f"({self._len} samples: use 0..{self._len - 1})")
        shard = bisect.bisect_right(self._starts_list, i) - 1
        return shard, i - self._starts_list[shard]

    def locate(self, i: int) -> tuple[str, int]:
        """(shard name, index inside the shard) of sample `i`, for messages."""
        shard, local = self._shard_of(i)
        return self._names[shard], local

    def __getitem__(self, i) -> dict:
        shard, local = self._shard_of(i)
        global_id = self._starts_list[shard] + local
        sample = {}
        for name, kind in self.fields.items():
            if kind == "scalar":
                sample[name] = self._columns[name][shard][local]
                continue
            rec = self._records[name]
            start = int(rec.pointers[global_id])
            view = rec.bins[shard][start:start + int(rec.lengths[global_id])]
            sample[name] = self._decode_json(name, shard, local, view) if kind == "json" else view
        return sample

    def _decode_json(self, field: str, shard: int, local: int, raw: np.ndarray):
        try:
            return json.loads(raw.tobytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            stem = self.manifest["fields"][field].get("file", field)
            raise FormatError(f"{self.path / self._names[shard] / stem}.bin: record {local} of "
                              f"field {field!r} is not valid JSON ({exc}); run `chute verify` "
                              "and restore the file") from None

    # -- columns and batches ---------------------------------------------------------------
    def _names_of(self, kind: str) -> list[str]:
        return [n for n, k in self.fields.items() if k == kind]

    def column(self, name: str) -> np.ndarray:
        """A scalar field over all samples in global order (read-only)."""
        if self.fields.get(name) != "scalar":
            raise KeyError(f"{self.path} has no scalar field {name!r} "
                           f"(scalar fields: {self._names_of('scalar')})")
        cached = self._column_cache.get(name)
        if cached is None:
            parts = self._columns[name]
            cached = np.concatenate(parts) if parts else np.empty(0)
            cached.flags.writeable = False
            self._column_cache[name] = cached
        return cached

    def _records_of(self, field: str) -> _Records:
        rec = self._records.get(field)
        if rec is None or self.fields[field] != "bytes":
            raise KeyError(f"{self.path} has no bytes field {field!r} "
                           f"(bytes fields: {self._names_of('bytes')})")
        return rec

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self._len):
            bad = int(ids[(ids < 0) | (ids >= self._len)][0])
            raise SampleIndexError(f"sample id {bad} is out of range for {self.path} "
                                   f"({self._len} samples: use 0..{self._len - 1})")
        return ids

    def sizes(self, ids=None, field: str = "image") -> np.ndarray:
        """Byte lengths (int64) of a bytes field for `ids` (all samples when None)."""
        rec = self._records_of(field)
        return rec.lengths if ids is None else rec.lengths[self._check_ids(ids)]

    def views(self, ids, field: str = "image") -> list[np.ndarray]:
        """Zero-copy uint8 views of the payloads of `ids`."""
        rec = self._records_of(field)
        ids = self._check_ids(ids)
        return self._views(rec, ids, rec.lengths[ids])

    def _views(self, rec: _Records, ids: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        pointers = rec.pointers[ids]
        starts = pointers.tolist()
        ends = (pointers + lengths).tolist()
        bins = rec.bins
        if len(bins) == 1:
            data = bins[0]
            return [data[s:e] for s, e in zip(starts, ends, strict=True)]
        shards = (np.searchsorted(self._starts, ids, side="right") - 1).tolist()
        return [bins[k][s:e] for k, s, e in zip(shards, starts, ends, strict=True)]

    def gather(self, ids, field: str = "image", out: np.ndarray | None = None):
        """Payloads of `ids` back to back: (data uint8, offsets int64[len(ids)+1]).
        Fills (a view of) `out` when it is a 1-D uint8 array large enough, else allocates."""
        rec = self._records_of(field)
        ids = self._check_ids(ids)
        lengths = rec.lengths[ids]
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if out is not None:
            if out.dtype != np.uint8 or out.ndim != 1 or not out.flags.c_contiguous:
                raise TypeError(f"out must be a contiguous 1-D uint8 array, got {out.dtype} "
                                f"{out.shape}")
        data = out[:total] if out is not None and out.size >= total else np.empty(total, np.uint8)
        # the index lookup above is vectorised; the copy is one memcpy per sample
        position = 0
        for part in self._views(rec, ids, lengths):
            end = position + part.size
            data[position:end] = part
            position = end
        return data, offsets


def _reopen(source: str, bytes_field: str) -> Dataset:
    return Dataset(source, bytes_field=bytes_field)
