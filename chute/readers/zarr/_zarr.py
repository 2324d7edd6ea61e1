"""A zarr group read directly, behind the Dataset Protocol (docs/design.md, "Zarr groups").

Every array of the group, subgroups included, is a field named by its path inside the group
("latents/base_frames"). Arrays whose first dimension is the sample count are per-sample fields:
`ndarray`, or `scalar` when 1-D of integers or floats; the others are `table`s, stored once and
looked up through an index field (`Pipeline(..., fields={table: Lookup(index)})`). A 0-d
array (a stored mean or scale) has no rows: no field but a constant, `ds.constants[name]`. The
sample count is the first dimension every array shares, or the one of the array named by
`sample_array` when the first dimensions differ (no guess: a table longer than the samples
would become the sample axis). An absent chunk file, or an inner chunk a shard's index records
as empty, fails its rows unless `missing_chunks="fill"` says the array was written sparse on
purpose (docs/latents.md).

zarr runs a background event loop, so the group is opened lazily in each process (a forked
child or a DDP rank reopens it, never inherits it). A batch reads each touched chunk once:
directly from its file, decompressed on a thread pool, for simple arrays
(`readers/zarr/_zarr_chunks.py`), else as one zarr orthogonal selection of the batch's distinct
ids (sharded arrays) -- never a zarr call per sample (~3 ms each).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chute.errors import FormatError
from chute.readers._errors import SampleIndexError, check_rows
from chute.readers._protocol import DatasetProtocol
from chute.readers._sizes import parse_size
from chute.readers.storage._paths import Confined, LeadsOutside, check_regular, plain_name

if TYPE_CHECKING:
    from chute.readers.zarr._shard_index import ShardIndex
    from chute.readers.zarr._zarr_chunks import ChunkCache, MissingChunk

__all__ = ["ZarrDataset", "ZarrArrayReader", "is_zarr_group", "MISSING_CHUNKS", "constants_json",
           "constants_from_json",
           "array_not_group"]

_GROUP_FILES = ("zarr.json", ".zgroup")
_NUMERIC = "biufc"  # numpy kinds chute reads: bool, integers, floats, complex
TABLE_CACHE_BYTES = 256 << 20  # tables up to this size are kept decoded in each process
CHUNK_CACHE = "256MiB"  # decoded chunks (of more than one row) kept per process by default
MISSING_CHUNKS = ("error", "fill")
_METADATA_FILES = ("zarr.json", ".zgroup", ".zarray", ".zattrs")


def is_zarr_group(path: Path) -> bool:
    """Whether `path` is a folder holding a zarr (v2 or v3) group."""
    return path.is_dir() and any((path / name).is_file() for name in _GROUP_FILES)


def _zarr():
    try:
        import zarr
    except ImportError:
        raise FormatError("reading zarr stores needs the `zarr` package: "
                          "pip install chute[zarr]") from None
    return zarr


def _fingerprint(confined: Confined) -> str:
    """Digest of every metadata document of the group (shapes, dtypes, codecs, chunking).
    Arrays are leaves of a zarr hierarchy: their folders (chunk files, possibly millions) are
    not walked. A document leading outside the store is a FormatError."""
    root = confined.root
    digest = hashlib.sha256()
    found = []
    for folder, dirs, files in os.walk(root):
        names = [f for f in files if f in _METADATA_FILES]
        found += [Path(folder, f) for f in names]
        if ".zarray" in names or ("zarr.json" in names and _is_array(
                confined.check(Path(folder, "zarr.json"), "metadata document"))):
            dirs[:] = []
        dirs.sort()
    for path in sorted(found):
        digest.update(os.fsencode(path.relative_to(root).as_posix()) + b"\0")  # any bytes
        digest.update(check_regular(confined.check(path, "metadata document"),
                                    "metadata document").read_bytes())
    return digest.hexdigest()[:16]


def _is_array(document: Path) -> bool:
    check_regular(document, "metadata document")  # a FIFO would block the read forever
    try:
        return json.loads(document.read_bytes()).get("node_type") == "array"
    except (ValueError, AttributeError):
        return False  # not ours to judge here: zarr names a broken document when it opens it


MAX_CHUNK_BYTES = 1 << 31  # a decoded chunk chute reads (blosc's own limit is about this)
UNBACKED_CHUNKS = 1 << 20  # chunks (or shards) along the first dimension beyond the files
_EMPTY_CACHE = 1 << 16  # shard files whose empty inner chunks a reader remembers


def _document(store: Path, name: str, array) -> Path:
    """The metadata document that claims `array`'s shape, for messages."""
    return store / name / (".zarray" if array.metadata.zarr_format == 2 else "zarr.json")


def _check_sizes(store: Path, name: str, array) -> None:
    """Sizes claimed by `array`'s metadata, bounded by what can exist (issue 26 item 12): a
    decoded chunk of at most MAX_CHUNK_BYTES (2^20 x 2^20 inner dimensions were a raw
    MemoryError), and a first dimension the files back: absent chunks may be fill values
    (missing_chunks="fill"), but more than UNBACKED_CHUNKS of them beyond the files in the
    array's folder (counted only then) is a claim no store backs (300 bytes claiming 2^62
    rows kept `verify` running forever). A FormatError naming the document."""
    shape, chunks = [int(d) for d in array.shape], [int(c) for c in array.chunks]
    itemsize = np.dtype(array.dtype).itemsize
    document = _document(store, name, array)
    chunk_bytes = math.prod(chunks) * itemsize
    if min(chunks, default=1) < 1 or (array.shards is not None and min(array.shards) < 1):
        # zarr opens chunks of 0 rows; every read of them then fails deep inside
        raise FormatError(f"{document}: array {name!r} claims chunks {tuple(chunks)}; every "
                          "chunk dimension must be at least 1: the metadata is corrupt or was "
                          "edited by hand, restore the store")
    if chunk_bytes > MAX_CHUNK_BYTES:
        raise FormatError(f"{document}: array {name!r} claims chunks {tuple(chunks)} of "
                          f"{chunk_bytes} bytes decoded, more than chute reads "
                          f"({MAX_CHUNK_BYTES}); the metadata is corrupt, or rechunk the array")
    unit = int(array.shards[0]) if array.shards is not None else max(chunks[0], 1)
    claimed = -(-shape[0] // unit)
    if claimed > UNBACKED_CHUNKS:
        need = claimed - UNBACKED_CHUNKS
        found = 0
        for _, _, files in os.walk(store / name):
            found += len(files)
            if found >= need:
                return
        raise FormatError(f"{document}: array {name!r} claims {shape[0]} rows ({claimed} "
                          f"chunks along the first dimension) but its folder holds {found} "
                          "files; the metadata is corrupt or was edited by hand: restore the "
                          "store")


@contextmanager
def _metadata_errors(path: Path):
    """zarr's errors on broken metadata (JSON, unknown codecs, invalid names) as a FormatError
    naming `path`."""
    try:
        yield
    except FormatError:
        raise
    except Exception as exc:
        raise FormatError(f"{path}: cannot be opened as a zarr group or array ({type(exc).__name__}"
                          f": {exc}); its metadata (zarr.json, .zgroup, .zarray, .zmetadata) is "
                          "corrupt or was edited by hand: restore the store") from None


def _missing_policy(store: Path, missing_chunks, names: list[str]) -> dict[str, bool]:
    """Array name -> whether its absent chunk files read as the fill value."""
    if isinstance(missing_chunks, str):
        missing_chunks = dict.fromkeys(names, missing_chunks)
    elif isinstance(missing_chunks, tuple):  # (name, policy) pairs: `open_options`
        missing_chunks = dict(missing_chunks)
    elif not isinstance(missing_chunks, dict):
        raise TypeError(f"missing_chunks must be 'error', 'fill' or a dict of them per array, "
                        f"got {missing_chunks!r}")
    unknown = sorted(set(missing_chunks) - set(names))
    if unknown:
        raise ValueError(f"{store}: missing_chunks names arrays {unknown} that the group does "
                         f"not have (arrays: {names})")
    bad = {n: v for n, v in missing_chunks.items() if v not in MISSING_CHUNKS}
    if bad:
        raise ValueError(f"missing_chunks: {bad} is not one of {MISSING_CHUNKS}")
    return {n: missing_chunks.get(n, "error") == "fill" for n in names}


def _constant(store: Path, name: str, array, fill: bool):
    """The value of 0-d array `name` (a numpy scalar, native byte order). Its one chunk file
    absent reads as the fill value only under missing_chunks="fill", as for any array."""
    key = array.metadata.encode_chunk_key(())
    if not fill and not os.path.lexists(store / name / key):
        raise FormatError(f"{store / name / key}: the chunk file of 0-d array {name!r} is "
                          "missing, which zarr would read as its fill value; restore the store, "
                          "or pass missing_chunks='fill' if that value is meant")
    try:
        value = np.asarray(array[()])
    except FormatError:  # a chunk file leading outside the store
        raise
    except Exception as exc:
        raise FormatError(f"{store / name / key}: the chunk of 0-d array {name!r} does not "
                          f"decode ({type(exc).__name__}: {exc}); restore the store") from None
    return value.astype(value.dtype.newbyteorder("="))[()]


def constants_json(constants: dict) -> dict[str, dict]:
    """`ZarrDataset.constants` as JSON holds them, what `dataset_info` reports and a converted
    dataset's manifest keeps: {name: {"dtype", "value"}} (complex as [real, imag]; the dtype
    says which).

    Args:
        constants: 0-d array name -> its numpy scalar.
    """
    out = {}
    for name, value in constants.items():
        item = np.asarray(value).item()
        out[name] = {"dtype": value.dtype.name,
                     "value": [item.real, item.imag] if isinstance(item, complex) else item}
    return out


def constants_from_json(stored: dict) -> dict:
    """The numpy scalars `constants_json` wrote: what a converted dataset's `constants` holds.

    Args:
        stored: {name: {"dtype", "value"}} as `constants_json` returns it.
    """
    out = {}
    for name, item in stored.items():
        dtype, value = np.dtype(item["dtype"]), item["value"]
        out[name] = dtype.type(complex(*value) if dtype.kind == "c" else value)
    return out


def array_not_group(path) -> FormatError:
    """The error for a zarr array (v2 `.zarray` or v3) given where chute reads a group.

    Args:
        path: the array's folder.
    """
    return FormatError(f"{path}: is a zarr array, not a group; chute reads a group whose "
                       "arrays are the fields: write it into a group, e.g. "
                       "zarr.open_group(PATH, mode='w').create_array('latent', data=...)")


def _reopen(path: str, options: dict) -> ZarrDataset:
    return ZarrDataset(path, **options)


class ZarrArrayReader:
    """One zarr array as a FieldReader: rows `ids` of the first dimension.

    Attributes:
        num_rows: rows of the array (the sample count for per-sample fields).
        sample_shape, dtype: one row's shape and dtype.
    """

    def __init__(self, dataset: ZarrDataset, name: str, shape: tuple, dtype: np.dtype,
                 fill_missing: bool = False):
        self.dataset = dataset
        self.field = name
        self.num_rows = int(shape[0])
        self.sample_shape = tuple(int(d) for d in shape[1:])
        self.dtype = np.dtype(dtype)
        self.fill_missing = fill_missing  # absent chunk files read as zarr's fill value
        self._plan: tuple[int, object] | None = None  # (pid, ChunkPlan or None)
        self._whole: tuple[int, np.ndarray | None] | None = None  # (pid, table read whole)
        self._index: tuple[ShardIndex | None] | None = None  # (sharded arrays' index layout,)
        # shard file -> (size, mtime_ns, empty blocks): its index read once while unchanged
        self._empty: dict[str, tuple[int, int, np.ndarray | None]] = {}

    def _chunk_plan(self):
        """The direct chunk reader's plan (None: read through zarr), made once per process."""
        if self._plan is None or self._plan[0] != os.getpid():
            from chute.readers.zarr._zarr_chunks import plan

            self._plan = (os.getpid(), plan(self._array(), self.dataset.confined(), self.field,
                                            self.fill_missing))
        return self._plan[1]

    def _array(self):
        return self.dataset.array(self.field)

    def lengths(self, ids: np.ndarray) -> None:
        return None  # zarr arrays are rectangular

    def get(self, shard: int, local: int, global_id: int) -> np.ndarray:
        return self.read(np.array([global_id], np.int64))[0]

    def _where(self) -> str:
        return f"array {self.field!r} of zarr group {self.dataset.path}"

    def _select(self, rows: np.ndarray) -> np.ndarray:
        try:
            return np.asarray(self._array().get_orthogonal_selection((rows,)))
        except (FormatError, SampleIndexError):
            raise
        except Exception as exc:
            raise FormatError(f"{self._where()}: rows {rows[:4].tolist()}... do not decode "
                              f"({type(exc).__name__}: {exc}); a chunk is corrupt or missing "
                              "its codec; restore the store") from None

    def read(self, ids: np.ndarray, out: np.ndarray | None = None,
             status: np.ndarray | None = None) -> np.ndarray:
        """Rows `ids` into `out` ([B, *sample_shape]), allocated when None. With `status`
        (uint8 [B]) rows whose chunk does not decode are marked non-zero (and zeroed) instead
        of raising."""
        ids = np.asarray(ids, dtype=np.int64)
        check_rows(ids, self.num_rows, self._where())
        if out is None:
            out = np.empty((len(ids), *self.sample_shape), self.dtype)
        if not len(ids):
            return out
        whole = self._table()
        if whole is not None:
            np.take(whole, ids, axis=0, out=out)
            return out
        return self._read_chunks(ids, out, status)

    def _read_chunks(self, ids: np.ndarray, out: np.ndarray,
                     status: np.ndarray | None) -> np.ndarray:
        chunk_plan = self._chunk_plan()
        if chunk_plan is not None:
            from chute.readers.zarr._zarr_chunks import read_rows

            read_rows(chunk_plan, ids, out, self._where(), status, self.dataset.chunk_cache())
            return out
        if not self.fill_missing:
            missing = self.absent_rows(ids)
            empty = self.empty_rows(ids) & ~missing  # in a shard that is there
            absent = missing | empty
            if absent.any():
                if status is None:
                    first = int(np.flatnonzero(absent)[0])
                    raise self._missing(int(ids[first])) if missing[first] else \
                        self._empty_error(int(ids[first]))
                status[absent] = 1
                out[absent] = 0
                present = ~absent
                if present.any():
                    kept = np.empty((int(present.sum()), *self.sample_shape), self.dtype)
                    failed = np.zeros(len(kept), np.uint8)
                    out[present] = self._read_chunks(ids[present], kept, failed)
                    status[present] = failed
                return out
        unique, inverse = np.unique(ids, return_inverse=True)
        try:
            values = self._select(unique)
        except FormatError as exc:
            if status is None or isinstance(exc, LeadsOutside):
                raise
            self._read_rows_one_by_one(ids, out, status)
            return out
        np.take(values, inverse, axis=0, out=out)
        return out

    def _chunk_files(self, chunk: int) -> list[str]:
        """The files (relative to the store) of chunk (or shard) `chunk` along the first
        dimension: one per chunk of the inner dimensions."""
        return [file for file, _ in self._grid_files(chunk)]

    def _grid_files(self, chunk: int) -> list[tuple[str, tuple[int, ...]]]:
        """(file, grid position in the other dimensions) of each file of chunk (or shard)
        `chunk` along the first dimension."""
        array = self._array()
        grid = array.shards if array.shards is not None else array.chunks
        inner = [range(-(-int(n) // max(int(c), 1))) for n, c in
                 zip(array.shape[1:], grid[1:], strict=True)]
        encode = array.metadata.encode_chunk_key
        return [(f"{self.field}/{encode((chunk, *rest))}", rest)
                for rest in itertools.product(*inner)]

    def _shard_index(self) -> ShardIndex | None:
        """The shard index layout of a sharded array (None: not sharded)."""
        if self._index is None:
            from chute.readers.zarr._shard_index import shard_index

            self._index = (shard_index(self._array()),)
        return self._index[0]

    def empty_blocks(self, shard: int) -> list[tuple[str, np.ndarray]]:
        """(shard file, bool per block of inner-chunk rows: recorded empty) for each file of
        shard `shard` (along the first dimension) that is there; [] for an unsharded array.
        A sharded layout whose index chute does not parse is a FormatError (its empty
        chunks could not be told from data)."""
        index = self._shard_index()
        if index is None:
            return []
        if index.why_not is not None:
            raise FormatError(f"{self._where()}: sharded with {index.why_not}, whose shard "
                              "index chute does not read, so chunks recorded empty (read as "
                              "zarr's fill value) cannot be told from data; open it with "
                              "missing_chunks='fill' if its rows may be fill values")
        confined, found = self.dataset.confined(), []
        for file, position in self._grid_files(shard):
            try:
                fd = confined.open(file, f"a shard of {self._where()}")
            except (FileNotFoundError, FormatError):
                # absent: absent_rows; not a regular file or leading outside: zarr's read
                # through the confined store names it (and fails only its rows)
                continue
            try:
                stat = os.fstat(fd)
                known = self._empty.get(file)
                if known is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
                    blocks = known[2]
                else:
                    blocks = index.empty_blocks(fd, (shard, *position))
                    if len(self._empty) >= _EMPTY_CACHE:
                        self._empty.clear()
                    self._empty[file] = (stat.st_size, stat.st_mtime_ns, blocks)
            finally:
                os.close(fd)
            if blocks is not None and blocks.any():
                found.append((file, blocks))
        return found

    def empty_rows(self, ids: np.ndarray) -> np.ndarray:
        """Which of the rows `ids` (bool [B]) lie in an inner chunk that their shard's index
        records as empty: zarr would deliver its fill value for them without a word."""
        out = np.zeros(len(ids), bool)
        index = self._shard_index()
        if index is None:
            return out
        per, rows = index.shard[0], index.inner[0]
        shard_of = ids // per
        for shard in np.unique(shard_of).tolist():
            found = self.empty_blocks(int(shard))
            if not found:
                continue
            blocks = np.logical_or.reduce([b for _, b in found])
            mine = shard_of == shard
            out[mine] = blocks[(ids[mine] - shard * per) // rows]
        return out

    def empty_spans(self, shards) -> list[tuple[str, int, int]]:
        """(shard file, first row, last row) of each inner-chunk row block recorded empty in
        the shards `shards` (indices along the first dimension), in row order."""
        index = self._shard_index()
        if index is None:
            return []
        per, rows = index.shard[0], index.inner[0]
        spans = []
        for shard in shards:
            first_file: dict[int, str] = {}
            for file, blocks in self.empty_blocks(int(shard)):
                for k in np.flatnonzero(blocks).tolist():
                    first_file.setdefault(k, file)
            for k in sorted(first_file):
                start = int(shard) * per + k * rows
                spans.append((first_file[k], start, min(start + rows, self.num_rows) - 1))
        return spans

    def _empty_error(self, row: int) -> MissingChunk:
        from chute.readers.zarr._zarr_chunks import MissingChunk

        index = self._shard_index()
        assert index is not None  # empty_rows found the row
        ((file, first, last),) = [s for s in self.empty_spans([row // index.shard[0]])
                                  if s[1] <= row <= s[2]][:1]
        rows = f"row {first}" if first == last else f"rows {first}-{last}"
        return MissingChunk(f"{self.dataset.path / file}: the chunk of {rows} of "
                            f"{self._where()} is recorded empty in its shard (its rows would "
                            "read as zarr's fill value); restore the store, or, if the array "
                            "was written sparse on purpose (zarr skips chunks equal to the "
                            "fill value), open it with missing_chunks='fill'")

    def chunk_rows(self) -> int:
        """Rows per chunk (per shard for a sharded array) along the first dimension."""
        array = self._array()
        return max(int((array.shards or array.chunks)[0]), 1)

    def absent_chunks(self, chunks) -> list[int]:
        """Those of `chunks` (indices along the first dimension) with a file absent (a
        symlink leading to no file included: zarr reads it as its fill value too)."""
        root = self.dataset.path
        return [c for c in chunks
                if not all(os.path.exists(root / f) for f in self._chunk_files(int(c)))]

    def absent_rows(self, ids: np.ndarray) -> np.ndarray:
        """Which of the rows `ids` (bool [B]) lie in a chunk whose file is absent: zarr would
        deliver its fill value for them without a word."""
        chunk_of = ids // self.chunk_rows()
        touched = np.unique(chunk_of)
        absent = self.absent_chunks(touched.tolist())
        return np.isin(chunk_of, np.asarray(absent, np.int64))

    def _missing(self, row: int) -> MissingChunk:
        from chute.readers.zarr._zarr_chunks import MissingChunk, missing_message

        chunk = row // self.chunk_rows()
        first = self._chunk_files(chunk)[0]
        return MissingChunk(missing_message(str(self.dataset.path / first), chunk,
                                            self._where()))

    def _table(self) -> np.ndarray | None:
        """A small table (at most TABLE_CACHE_BYTES) read whole, once per process: a lookup
        would otherwise decompress the table's chunks again for every batch. None for
        per-sample arrays, large tables, and a table with a corrupt chunk (read row by row,
        so only the rows of that chunk fail)."""
        if self.dataset.fields.get(self.field) != "table":
            return None
        if self._whole is None or self._whole[0] != os.getpid():
            whole = None
            if self.num_rows * self.dtype.itemsize * math.prod(self.sample_shape) <= \
                    TABLE_CACHE_BYTES:
                rows = np.arange(self.num_rows, dtype=np.int64)
                try:
                    whole = self._read_chunks(rows, np.empty((self.num_rows,
                                                              *self.sample_shape), self.dtype),
                                              None)
                    whole.flags.writeable = False
                except LeadsOutside:
                    raise
                except FormatError:
                    whole = None
            self._whole = (os.getpid(), whole)
        return self._whole[1]

    def _read_rows_one_by_one(self, ids: np.ndarray, out: np.ndarray,
                              status: np.ndarray) -> None:
        """After a batch failed: each row on its own, so only the corrupt chunks' rows fail."""
        for row, i in enumerate(ids.tolist()):
            try:
                out[row] = self._select(np.array([i], np.int64))[0]
            except LeadsOutside:
                raise
            except FormatError:
                status[row] = 1
                out[row] = 0


class ZarrDataset(DatasetProtocol):
    """A zarr group opened for reading (see `chute.open_dataset`). Picklable: a copy reopens
    the group lazily in its own process.

    Attributes:
        path: the group's folder. fields: array name -> kind ("ndarray", "scalar", "table").
        specs: array name -> {"kind", "dtype", "shape", "chunks", "zarr_format"}.
        constants: 0-d array name -> its value (a numpy scalar), read when opened: no rows,
            so no field (docs/latents.md, "Constants").
    """

    def __init__(self, path: str | Path, *, sample_array: str | None = None,
                 missing_chunks: str | dict[str, str] = "error",
                 chunk_cache: str | int = CHUNK_CACHE, _need_samples: bool = True):
        """Open the zarr group at `path` (see `chute.open_dataset`).

        Args:
            path: the group's folder (v2 or v3).
            sample_array: the array whose rows are the samples (a path such as
                "latents/base_frames"); needed when the arrays' first dimensions differ.
            missing_chunks: "error" (default): an absent chunk file fails its rows (raised,
                or substituted under on_error="skip"); "fill": it reads as zarr's fill value
                (arrays written sparse on purpose); or {array: "error" | "fill"} per array.
            chunk_cache: bytes of decoded chunks (of more than one row) kept per process,
                e.g. "256MiB"; 0 keeps none.
        """
        self.path = Path(path)
        if not is_zarr_group(self.path):
            raise FormatError(f"{self.path}: not a zarr group (no zarr.json or .zgroup)")
        zarr = _zarr()
        self._options = {"sample_array": sample_array, "missing_chunks": missing_chunks,
                         "chunk_cache": chunk_cache}
        self._cache_bytes = parse_size(chunk_cache)
        self._cache: tuple[int, ChunkCache] | None = None
        self._opened: tuple[int, object, dict] | None = None  # (pid, store, name -> array)
        store = self._this_process()[1]  # opened here: the folder is resolved once
        with _metadata_errors(self.path), warnings.catch_warnings():
            # a folder that is no zarr node (notes, a copy's leftovers) is not ours to warn of
            warnings.filterwarnings("ignore", "Object at .* is not recognized")
            try:
                group = zarr.open_group(store, mode="r")
            except zarr.errors.ContainsArrayError:  # a valid store, not a damaged one
                raise array_not_group(self.path) from None
            arrays = dict(sorted((name, node) for name, node in group.members(max_depth=None)
                                 if isinstance(node, zarr.Array)))
        for name in arrays:  # each opened as the folder of that path: no way out of the store
            for part in name.split("/"):
                plain_name(part, "array name", self.path, folder="zarr store",
                           fix="its metadata (zarr.json, .zmetadata) is corrupt or was edited "
                               "by hand")
        # arrays of strings, bytes, objects or records have no fixed-size numeric rows to batch
        self.unreadable: dict[str, str] = {n: str(a.dtype) for n, a in arrays.items()
                                           if np.dtype(a.dtype).kind not in _NUMERIC}
        arrays = {n: a for n, a in arrays.items() if n not in self.unreadable}
        if not arrays:
            others = f" (only arrays of {self.unreadable})" if self.unreadable else ""
            raise FormatError(f"{self.path}: the zarr group holds no arrays of numbers{others}; "
                              "write the per-sample arrays into it (or into its subgroups)")
        fill = _missing_policy(self.path, missing_chunks, list(arrays))
        # 0-d arrays (a mean or scale stored next to the latents) have no sample axis
        zero_d = {n: a for n, a in arrays.items() if a.ndim == 0}
        arrays = {n: a for n, a in arrays.items() if n not in zero_d}
        if not arrays:
            raise FormatError(f"{self.path}: the zarr group holds only 0-d arrays "
                              f"({sorted(zero_d)}), no per-sample ones; write the per-sample "
                              "arrays into it (or into its subgroups)")
        self.constants = {n: _constant(self.path, n, a, fill[n]) for n, a in zero_d.items()}
        for name, array in arrays.items():
            _check_sizes(self.path, name, array)
        self._len = self._samples(arrays, sample_array, _need_samples)
        self.fingerprint = _fingerprint(store.confined)
        self.specs: dict[str, dict] = {name: self._spec(a) for name, a in arrays.items()}
        self.fields: dict[str, str] = {n: s["kind"] for n, s in self.specs.items()}
        self._readers = {n: ZarrArrayReader(self, n, tuple(s["shape"]), np.dtype(s["dtype"]),
                                            fill[n])
                         for n, s in self.specs.items()}
        self._columns: dict[str, np.ndarray] = {}

    def _samples(self, arrays: dict, sample_array: str | None, need: bool) -> int:
        """The sample count: the first dimension of `sample_array`, else the one every array
        shares; differing ones without a choice are refused (a FormatError saying what to
        pass), or, when not `need`ed (verify), the largest."""
        firsts = {n: int(a.shape[0]) for n, a in arrays.items()}
        if sample_array is not None:
            if sample_array not in firsts:
                why = f" holds {self.unreadable[sample_array]} values, not numbers" \
                    if sample_array in self.unreadable else " is not an array of the group"
                raise FormatError(f"{self.path}: sample_array {sample_array!r}{why}; pass one "
                                  f"of {sorted(firsts)}")
            return firsts[sample_array]
        if len(set(firsts.values())) > 1 and need:
            shown = ", ".join(f"{n} {v}" for n, v in sorted(firsts.items(),
                                                              key=lambda kv: -kv[1]))
            raise FormatError(f"{self.path}: the arrays' first dimensions differ ({shown}), so "
                              "which one counts the samples is ambiguous; name it: "
                              "open_dataset(path, sample_array=NAME), or --sample-array NAME "
                              "on the command line")
        return max(firsts.values())

    def _spec(self, array) -> dict:
        shape = [int(d) for d in array.shape]
        if shape[0] != self._len:
            kind = "table"
        elif array.ndim == 1 and array.dtype.kind in "iufb":
            kind = "scalar"
        else:
            kind = "ndarray"
        # zarr delivers native byte order whatever the store holds (v2 '>f4'); so does chute
        dtype = np.dtype(array.dtype).newbyteorder("=")
        return {"kind": kind, "dtype": dtype.str, "shape": shape,
                "chunks": [int(c) for c in array.chunks],
                "shards": None if array.shards is None else [int(c) for c in array.shards],
                "zarr_format": int(array.metadata.zarr_format)}

    def _store(self):
        """zarr's view of the folder, every read confined to it (`readers/zarr/_zarr_store.py`)."""
        _zarr()
        from chute.readers.zarr._zarr_store import ConfinedStore

        return ConfinedStore(self.path)

    def _this_process(self) -> tuple:
        if self._opened is None or self._opened[0] != os.getpid():
            self._opened = (os.getpid(), self._store(), {})
        return self._opened

    def confined(self) -> Confined:
        """The store's folder, resolved once in this process, for direct chunk reads."""
        return self._this_process()[1].confined

    def array(self, name: str):
        """The zarr array `name`, opened in this process on first use."""
        _, store, arrays = self._this_process()
        if name not in arrays:
            zarr = _zarr()
            with _metadata_errors(self.path / name):
                arrays[name] = zarr.open_array(store, path=name, mode="r")
        return arrays[name]

    @property
    def url(self) -> str:
        return self.path.absolute().as_uri()

    def chunk_cache(self) -> ChunkCache | None:
        """This process's cache of decoded chunks (None when chunk_cache=0)."""
        if not self._cache_bytes:
            return None
        if self._cache is None or self._cache[0] != os.getpid():
            from chute.readers.zarr._zarr_chunks import ChunkCache

            self._cache = (os.getpid(), ChunkCache(self._cache_bytes))
        return self._cache[1]

    @property
    def open_options(self) -> dict:
        """What `open_dataset` takes, besides the path, to open this group the same way."""
        found: dict[str, object] = {
            k: v for k, v in self._options.items()
            if v != {"missing_chunks": "error", "chunk_cache": CHUNK_CACHE}.get(k)}
        missing = found.get("missing_chunks")
        if isinstance(missing, dict):  # hashable, as a DatasetRef is
            found["missing_chunks"] = tuple(sorted(missing.items()))
        return found

    def __reduce__(self):
        return (_reopen, (str(self.path), self._options))

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        fields = ", ".join([f"{n}:{k}" for n, k in self.fields.items()] +
                           [f"{n}:constant {v.dtype.name} {v}" for n, v in self.constants.items()]
                           + [f"{n}:unreadable {d}" for n, d in self.unreadable.items()])
        return f"<chute ZarrDataset {self.path} samples={self._len} {fields}>"

    def _check_index(self, i) -> int:
        try:
            i = int(i)
        except (TypeError, ValueError):
            raise TypeError(f"sample index must be an integer, got {i!r}") from None
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise SampleIndexError(f"sample {i} is out of range for {self.path} "
                                   f"({self._len} samples: use 0..{self._len - 1})")
        return j

    @property
    def shard_starts(self) -> np.ndarray:
        """The first sample of every chunk along the first dimension, then the sample count
        (int64, len chunks + 1): `Pipeline(ds, order=ShardWindows(shards=k))` shuffles
        windows of k chunks, so a shuffled epoch decodes each chunk once. A chunk is a shard
        for a sharded array (a shard file is read whole). When the per-sample arrays are
        chunked differently, the chunks are those of the array with the largest rows (the
        costliest to decode: a small index column is often one chunk of every row)."""
        readers = [r for n, r in self._readers.items() if self.fields[n] != "table"]
        heaviest = max(readers, default=None, key=lambda r: (
            r.dtype.itemsize * math.prod(r.sample_shape), r.chunk_rows()))
        rows = 1 if heaviest is None else heaviest.chunk_rows()
        return np.append(np.arange(0, self._len, rows, dtype=np.int64), np.int64(self._len))

    def locate(self, i: int) -> tuple[str, int]:
        """(group folder name, sample index), for messages: a zarr group has no shards."""
        return self.path.name, self._check_index(i)

    def __getitem__(self, i) -> dict:
        """One sample: every per-sample array's row `i` (tables are not per sample)."""
        i = self._check_index(i)
        return {n: r.get(0, i, i) for n, r in self._readers.items()
                if self.fields[n] != "table"}

    def why_missing(self, name: str) -> str | None:
        """Why `name` is not a field, when it is a 0-d array (a Pipeline's error says it)."""
        if name not in self.constants:
            return None
        return (f"array {name!r} is 0-d, a constant ({self.constants[name]!r}), not a "
                f"per-sample field: read it as ds.constants[{name!r}]")

    def reader(self, field: str) -> ZarrArrayReader:
        try:
            return self._readers[field]
        except KeyError:
            if field in self.constants:
                raise KeyError(f"{self.path}: {self.why_missing(field)}") from None
            if field in self.unreadable:
                raise KeyError(f"array {field!r} of {self.path} holds {self.unreadable[field]} "
                               "values, not numbers: chute batches numeric arrays only (store "
                               "it as numbers, e.g. token ids, or read it with zarr)") from None
            raise KeyError(f"{self.path} has no array {field!r} (arrays: "
                           f"{sorted(self._readers)})") from None

    def read(self, field: str, ids, out=None) -> np.ndarray:
        """Rows `ids` of array `field` (sample ids, or table rows for a table)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        return self.reader(field).read(ids.astype(np.int64, copy=False), out)

    def column(self, name: str) -> np.ndarray:
        """A 1-D per-sample array (`scalar` field) read whole, once per process."""
        if self.fields.get(name) != "scalar":
            having = [n for n, k in self.fields.items() if k == "scalar"]
            found = f"its shape is {self.specs[name]['shape']}" if name in self.specs else \
                "no such array"
            raise KeyError(f"{self.path} has no 1-D per-sample array {name!r} of "
                           f"{self._len} numbers ({found}; such arrays: {having})")
        if name not in self._columns:
            column = self.reader(name).read(np.arange(self._len, dtype=np.int64))
            column.flags.writeable = False
            self._columns[name] = column
        return self._columns[name]

    def gather(self, ids, field: str = "image", out=None):
        raise KeyError(f"{self.path} is a zarr group: it has no bytes field {field!r}")
