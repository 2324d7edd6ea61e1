"""Per-sample records in `.bin` + `.idx` pairs (MMIDIDX index): the storage that the bytes, json
and ndarray kinds share. Writing appends records back to back; reading maps every shard's `.bin`
and concatenates the shard indices into global pointer/length arrays (docs/design.md, "Shard
format")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers.format._mmidx import MAX_LENGTH, check_extents, encode_index, read_index
from chute.readers.storage._files import HashingWriter, atomic_write_bytes, map_path
from chute.readers.storage._shard_files import LazyBins, ShardFiles

__all__ = ["RecordWriter", "Records", "load_records", "map_file", "write_index", "as_bytes"]


def as_bytes(value) -> memoryview:
    """A flat byte view of bytes-like values and NumPy arrays (no copy when contiguous)."""
    if isinstance(value, np.ndarray):
        value = np.ascontiguousarray(value)
        return memoryview(value.reshape(-1).view(np.uint8))
    return memoryview(value).cast("B")


def write_index(path: Path, lengths) -> dict:
    """Atomically write the MMIDIDX index of back-to-back records; returns its manifest entry."""
    lengths = np.asarray(lengths, dtype=np.int64)
    pointers = np.zeros_like(lengths)
    np.cumsum(lengths[:-1], out=pointers[1:])
    return atomic_write_bytes(path, encode_index(lengths, pointers, np.arange(len(lengths) + 1)))


class RecordWriter:
    """Appends one field's records to `<stem>.bin` of one shard; `commit` writes `<stem>.idx`."""

    def __init__(self, folder: Path, stem: str):
        self.folder = folder
        self.stem = stem
        self._bin = HashingWriter(folder / f"{stem}.bin")
        self._lengths: list[int] = []

    @staticmethod
    def check_length(field: str, sample: int, size: int) -> None:
        if size > MAX_LENGTH:
            raise ValueError(f"sample {sample} field {field!r}: {size} bytes is more than an "
                             "index entry holds (2 GiB - 1); split the value")

    def add(self, data) -> None:
        self._bin.write(data)
        self._lengths.append(len(data))

    def commit(self) -> dict[str, dict]:
        entry = self._bin.commit()
        idx = write_index(self.folder / f"{self.stem}.idx", self._lengths)
        return {f"{self.stem}.bin": entry, f"{self.stem}.idx": idx}

    def abort(self) -> None:
        self._bin.abort()


def map_file(path: Path) -> np.ndarray:
    """Read-only uint8 view of a whole file (zero-copy)."""
    return map_path(path)  # holds no descriptor: a dataset of many shards stays under ulimit -n


class Records:
    """One field's records over all shards: mapped `.bin` per shard, global pointers/lengths."""

    def __init__(self, bins: Sequence[np.ndarray], pointers: np.ndarray, lengths: np.ndarray,
                 starts: np.ndarray, paths: list[Path]):
        self.bins = bins
        self.pointers = pointers  # int64 [N], byte offset inside the sample's shard .bin
        self.lengths = lengths  # int64 [N], bytes
        self.starts = starts  # int64 [shards + 1], first global id of each shard
        self.paths = paths  # the .bin of each shard, for messages

    def shard_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, ids, side="right") - 1

    def views(self, ids: np.ndarray) -> list[np.ndarray]:
        """Zero-copy uint8 views of the records `ids` (global ids, already checked)."""
        pointers = self.pointers[ids]
        starts = pointers.tolist()
        ends = (pointers + self.lengths[ids]).tolist()
        bins = self.bins
        if len(bins) == 1:
            data = bins[0]
            return [data[s:e] for s, e in zip(starts, ends, strict=True)]
        shards = self.shard_of(ids).tolist()
        if isinstance(bins, LazyBins):  # each shard looked up (and fetched) once per batch
            maps = {k: bins[k] for k in dict.fromkeys(shards)}
            return [maps[k][s:e] for k, s, e in zip(shards, starts, ends, strict=True)]
        return [bins[k][s:e] for k, s, e in zip(shards, starts, ends, strict=True)]

    def view(self, shard: int, global_id: int) -> np.ndarray:
        start = int(self.pointers[global_id])
        return self.bins[shard][start:start + int(self.lengths[global_id])]

    def where(self, global_id: int) -> str:
        """`<file>: record <local>` of a global id, for error messages."""
        shard = int(self.shard_of(np.array([global_id]))[0])
        return f"{self.paths[shard]}: record {global_id - int(self.starts[shard])}"


def load_records(folders: list[Path], stem: str, counts: list[int],
                 trailing_ok: bool, files: ShardFiles | None = None) -> Records:
    """Open `<folder>/<stem>.bin/.idx` of every shard, checking counts and bounds. With
    `files` (a remote dataset's), a `.bin` it fetches lazily is mapped on first use and its
    bounds are checked against the manifest's size (the download is checked against it)."""
    bins: Sequence[np.ndarray]
    mapped: list[np.ndarray] = []
    pointers, lengths, paths = [], [], []
    lazy = files is not None and all(files.lazy(f / f"{stem}.bin") for f in folders)
    for folder, count in zip(folders, counts, strict=True):
        bin_path, idx_path = folder / f"{stem}.bin", folder / f"{stem}.idx"
        index = read_index(idx_path, trailing_ok=trailing_ok)
        if len(index.lengths) != count:
            raise FormatError(f"{idx_path}: holds {len(index.lengths)} samples but the manifest "
                              f"says {count}; the index does not belong to this manifest")
        if lazy:
            assert files is not None
            size = files.size(bin_path)
        else:
            try:
                data = map_file(bin_path)
            except FileNotFoundError:
                raise FormatError(f"{bin_path}: missing; restore the shard or re-convert") \
                    from None
            mapped.append(data)
            size = data.size
        nbytes = index.byte_lengths()
        check_extents(index.pointers, nbytes, size, bin_path, idx_path)
        pointers.append(index.pointers.astype(np.int64, copy=False))
        lengths.append(nbytes)
        paths.append(bin_path)
    if lazy:
        assert files is not None
        bins = LazyBins(files, paths)
    else:
        bins = mapped
    empty = np.empty(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    return Records(bins, np.concatenate(pointers) if pointers else empty,
                   np.concatenate(lengths) if lengths else empty, starts, paths)
