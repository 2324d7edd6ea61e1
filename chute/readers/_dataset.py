"""Dataset: O(1) random access into memory-mapped shards, one reader per field from its kind."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

import numpy as np

from chute.errors import FormatError
from chute.readers._errors import SampleIndexError
from chute.readers._protocol import DatasetProtocol
from chute.readers.format._column_checks import check_columns
from chute.readers.format._layout import Layout, resolve_layout
from chute.readers.format._manifest import manifest_fingerprint
from chute.readers.kinds._kind import FieldReader, OpenArgs
from chute.readers.kinds._kinds import get_kind

if TYPE_CHECKING:
    from chute.readers._remote import RemoteSource
    from chute.readers.storage._shard_files import ShardFiles

__all__ = ["Dataset"]


def _check_sizes(layout: Layout, lazy=frozenset()) -> None:
    """Every listed file is present with its size (`lazy` ones, fetched when first read,
    are checked then)."""
    for path, size in layout.expected_sizes.items():
        if path in lazy:
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise FormatError(f"{path}: missing (listed in {layout.root}/chute.json); restore "
                              "the shard or re-convert the dataset") from None
        except OSError as exc:
            raise FormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if not S_ISREG(stat.st_mode):
            raise FormatError(f"{path}: not a regular file (listed in {layout.root}/chute.json "
                              "as one); restore the file or re-convert the dataset")
        actual = stat.st_size
        if actual != size:
            raise FormatError(f"{path}: is {actual} bytes but the manifest says {size}; the "
                              "file is truncated or was modified; restore it or re-convert")


class Dataset(DatasetProtocol):
    """A chute dataset opened for reading; see `open_dataset`. Picklable: the copy reopens the
    memory maps (cheap: only the manifest, indices and column headers are read).

    Attributes:
        path: the dataset folder (or Megatron prefix).
        url: its storage URL (`file:///...`), with `fingerprint` its identity across processes.
        fields: field name -> kind name; `specs` holds the full manifest spec of each field.
        constants: a dataset converted from a zarr group: its 0-d arrays' values (numpy
            scalars, as `ZarrDataset.constants` gives them); else empty.
    """

    def __init__(self, path: str | Path, *, bytes_field: str = "data",
                 remote: RemoteSource | None = None):
        self._source = str(path)
        self._bytes_field = bytes_field
        self._remote = remote
        layout = resolve_layout(path, bytes_field)
        _check_sizes(layout, self._lazy())
        self.path: Path = layout.root
        self.manifest: dict = layout.manifest
        self.fingerprint: str = layout.fingerprint
        # what round 2 (files only) and round 3 (files and specs) called this dataset: resume
        # states saved then still load
        self.earlier_fingerprints: tuple[str, ...] = (
            manifest_fingerprint(layout.manifest, specs=False),
            manifest_fingerprint(layout.manifest, whole=False))
        self.class_names: list[str] | None = layout.manifest.get("class_names")
        from chute.readers.zarr._zarr import constants_from_json

        self.constants: dict = constants_from_json(
            (layout.manifest.get("zarr") or {}).get("constants") or {})
        self.specs: dict[str, dict] = layout.manifest["fields"]
        self.fields: dict[str, str] = {name: spec["kind"] for name, spec in self.specs.items()}
        shards = layout.manifest["shards"]
        counts = [s["num_samples"] for s in shards]
        self._names = [s["name"] for s in shards]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._starts_list = self._starts.tolist()
        self._len = int(self._starts[-1])
        self._readers: dict[str, FieldReader] = _open_readers(layout, counts, self._files())
        check_columns(self, layout)

    @classmethod
    def remote(cls, url: str, *, cache_dir=None, cache_limit=None,
               fingerprint: str | None = None, offline: bool = False) -> Dataset:
        """A chute dataset in object storage (see `open_dataset`); `fingerprint`: the version
        expected (reopening it needs no server when its manifest is cached); `offline`: never
        ask the server."""
        from chute.readers._remote import open_remote

        source = open_remote(url, cache_dir=cache_dir, cache_limit=cache_limit,
                             fingerprint=fingerprint, offline=offline)
        return cls(source.folder, remote=source)

    @property
    def shard_starts(self) -> np.ndarray:
        """The first sample of every shard, then the sample count (int64, len shards + 1)."""
        return self._starts.copy()

    def _lazy(self):
        return frozenset() if self._remote is None else frozenset(self._remote.files.files)

    def _files(self):
        return None if self._remote is None else self._remote.files

    def prefetch(self, batches: Iterable[np.ndarray]):
        """Fetch the shards that `batches` (sample ids, in reading order) need ahead of
        reading them, on background threads; a handle with `close()`. None for a local
        dataset (nothing to fetch). A Pipeline calls it at the start of every epoch."""
        if self._remote is None:
            return None
        from chute.readers.storage._shard_files import ReadAhead

        source = self._remote
        starts = self._starts

        def paths_of(ids: np.ndarray) -> list[Path]:
            shards = np.searchsorted(starts, ids, side="right") - 1
            _, first = np.unique(shards, return_index=True)
            return [p for k in shards[np.sort(first)].tolist() for p in source.shard_paths[k]]

        files = source.files
        ahead = _read_ahead()
        if files.keep is not None:
            ahead = max(1, min(ahead, files.keep - 1))
        return ReadAhead(files, paths_of, batches, ahead, workers=min(ahead, 4))

    def close(self) -> None:
        """Drop the memory maps (and the file descriptors they hold) now rather than at garbage
        collection; views already handed out stay valid. A later read maps the files again
        (after checking that the dataset is still the same one)."""
        self._readers = _ClosedReaders(self)
        if self._remote is not None:
            self._remote.files.release()

    def _reopen_readers(self) -> dict:
        layout = resolve_layout(self._source, self._bytes_field)
        if layout.fingerprint != self.fingerprint:
            raise FormatError(f"dataset {self.path} changed since it was opened and closed "
                              "(its manifest differs); open it again")
        _check_sizes(layout, self._lazy())
        counts = [s["num_samples"] for s in layout.manifest["shards"]]
        self._readers = _open_readers(layout, counts, self._files())
        return self._readers

    @property
    def url(self) -> str:
        if self._remote is not None:
            return self._remote.url
        return Path(self.path).absolute().as_uri()

    @property
    def open_options(self) -> dict:
        """What another process passes to `open_dataset` with `url` to open this dataset the
        same way (a remote dataset's cache settings)."""
        if self._remote is None:
            return {}
        return {"cache_dir": self._remote.cache_dir, "cache_limit": self._remote.cache_limit}

    def __reduce__(self):
        if self._remote is not None:
            return (_reopen_remote, (self._remote.url, self._remote.fingerprint,
                                     self._remote.cache_dir, self._remote.cache_limit,
                                     self._remote.offline))
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
        return {name: reader.get(shard, local, global_id)
                for name, reader in self._readers.items()}

    # -- fields and batches ----------------------------------------------------------------
    def reader(self, field: str) -> FieldReader:
        """The reader of `field` (what its kind opened)."""
        try:
            return self._readers[field]
        except KeyError:
            raise KeyError(f"{self.path} has no field {field!r} (fields: "
                           f"{sorted(self._readers)})") from None

    def _capable(self, field: str, method: str, what: str):
        reader = self._readers.get(field)
        if reader is None or not hasattr(reader, method):
            having = [n for n, r in self._readers.items() if hasattr(r, method)]
            raise KeyError(f"{self.path} has no {what} field {field!r} ({what} fields: "
                           f"{having})")
        return getattr(reader, method)

    def read(self, field: str, ids, out: Any = None) -> Any:
        """Values of `field` for the samples `ids`: an array `[B, *shape]` for fields of fixed
        shape (filling `out` when given), else a list. For a table field, `ids` are rows of the
        table (which its reader range-checks against the table's rows)."""
        if self.fields.get(field) == "table":
            return self.reader(field).read(self._check_ids(ids, bounded=False), out)
        return self.reader(field).read(self._check_ids(ids), out)

    def column(self, name: str) -> np.ndarray:
        """A scalar field over all samples in global order (read-only)."""
        return self._capable(name, "column", "scalar")()

    def _check_ids(self, ids, bounded: bool = True) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        ids = ids.astype(np.int64, copy=False)
        if not bounded:  # the caller's reader checks the upper bound
            if ids.size and ids.min() < 0:
                raise SampleIndexError(f"row {int(ids.min())} of {self.path} is negative")
            return ids
        if ids.size and (ids.min() < 0 or ids.max() >= self._len):
            bad = int(ids[(ids < 0) | (ids >= self._len)][0])
            raise SampleIndexError(f"sample id {bad} is out of range for {self.path} "
                                   f"({self._len} samples: use 0..{self._len - 1})")
        return ids

    def sizes(self, ids=None, field: str = "image") -> np.ndarray:
        """Byte lengths (int64) of a bytes field for `ids` (all samples when None)."""
        sizes = self._capable(field, "sizes", "bytes")
        return sizes(None if ids is None else self._check_ids(ids))

    @property
    def dtype(self) -> np.dtype | None:
        """The element type a Megatron-LM pair's index declares (e.g. uint16 tokens; payloads
        are still delivered as bytes: `.view(ds.dtype)`); None for a chute dataset."""
        if self.manifest.get("format") == "chute":
            return None
        return np.dtype(self.specs[self._bytes_field]["dtype"])

    def _bytes_field_or(self, field: str | None) -> str:
        """`field`, or by default "image" when there is one, else the only bytes field."""
        if field is not None:
            return field
        if "image" in self.fields:
            return "image"
        found = [f for f, kind in self.fields.items() if kind == "bytes"]
        if len(found) != 1:
            raise ValueError(f"{self.path}: name the field (bytes fields: {found})")
        return found[0]

    def views(self, ids, field: str | None = None) -> list[np.ndarray]:
        """Zero-copy uint8 views of the payloads of `ids` (default field: see `gather`)."""
        field = self._bytes_field_or(field)
        self._capable(field, "sizes", "bytes")
        return self._readers[field].read(self._check_ids(ids))

    def gather(self, ids, field: str | None = None, out: np.ndarray | None = None):
        """Payloads of `ids` back to back: (data uint8, offsets int64[len(ids)+1]).
        Fills (a view of) `out` when it is a 1-D uint8 array large enough, else allocates.
        The default field is "image", else the dataset's only bytes field (a Megatron pair's)."""
        field = self._bytes_field_or(field)
        return self._capable(field, "gather", "bytes")(self._check_ids(ids), out)


def _open_readers(layout: Layout, counts: list[int],
                  files: ShardFiles | None = None) -> dict[str, FieldReader]:
    """Every field's reader (what its kind opens: memory maps of its files)."""
    return {name: get_kind(spec["kind"]).open(OpenArgs(
                name, spec, layout.stems[name], layout.folders, counts,
                layout.trailing_index_ok, files))
            for name, spec in layout.manifest["fields"].items()}


class _ClosedReaders(dict):
    """The readers of a closed Dataset: the first use maps the files again."""

    def __init__(self, dataset: Dataset):
        super().__init__()
        self.dataset = dataset

    def __getitem__(self, key):
        return self.dataset._reopen_readers()[key]

    def get(self, key, default=None):
        return self.dataset._reopen_readers().get(key, default)

    def items(self):
        return self.dataset._reopen_readers().items()

    def __iter__(self):
        return iter(self.dataset._reopen_readers())


def _reopen(source: str, bytes_field: str) -> Dataset:
    return Dataset(source, bytes_field=bytes_field)


def _reopen_remote(url: str, fingerprint: str, cache_dir: str, cache_limit,
                   offline: bool = False) -> Dataset:
    return Dataset.remote(url, cache_dir=cache_dir, cache_limit=cache_limit,
                          fingerprint=fingerprint, offline=offline)


def _read_ahead() -> int:
    """Payload files fetched ahead of the reader: $CHUTE_READ_AHEAD (default 4)."""
    text = os.environ.get("CHUTE_READ_AHEAD", "4")
    try:
        return max(int(text), 1)
    except ValueError:
        raise FormatError(f"CHUTE_READ_AHEAD={text!r} is not a count of files; set e.g. "
                          "4") from None
