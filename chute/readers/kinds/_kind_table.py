"""Kind `table`: one array stored once per dataset, not per sample (e.g. one CLIP embedding per
source video), delivered per sample through an integer index field
(`Pipeline(..., fields={"clip_emb": Lookup("segment_to_video")})`; docs/design.md, "Tables and
lookups").

The table is `<dataset>/<field>.table.npy`, next to the shard folders; its manifest spec holds
its dtype, shape, size and checksum. `ShardWriter(..., tables={name: array})` writes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers._errors import check_rows
from chute.readers.kinds._kind import OpenArgs
from chute.readers.kinds._kind_scalar import save_column
from chute.readers.storage._paths import inside

__all__ = ["TABLE", "TableReader", "table_array", "write_table"]


class TableReader:
    """A memory-mapped table. `read(rows)` gathers table rows (not sample ids); `get` returns
    the whole table (a sample has no row of its own)."""

    def __init__(self, field: str, path: Path, table: np.ndarray):
        self.field = field
        self.path = path
        self.table = table
        self.num_rows = int(table.shape[0])
        self.sample_shape = tuple(int(d) for d in table.shape[1:])
        self.dtype = table.dtype

    def lengths(self, ids: np.ndarray) -> None:
        return None

    def get(self, shard: int, local: int, global_id: int) -> np.ndarray:
        return self.table

    def read(self, rows: np.ndarray, out: np.ndarray | None = None,
             status: np.ndarray | None = None) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        check_rows(rows, self.num_rows, f"table {self.field!r} ({self.path})")
        if out is None:
            out = np.empty((len(rows), *self.sample_shape), self.dtype)
        np.take(self.table, rows, axis=0, out=out)
        return out


def _unsafe(field) -> bool:
    """A name that cannot name `<field>.table.npy` inside the dataset folder."""
    return not isinstance(field, str) or not field or field.startswith(".") or \
        any(c in field for c in "/\\\0")


def table_array(field: str, values) -> np.ndarray:
    """`values` as a table: a numeric array with a first dimension (ValueError otherwise)."""
    if _unsafe(field):
        raise ValueError(f"table name {field!r} cannot name a file: use letters, digits, '_', "
                         "'-' or '.' (not first)")
    array = np.ascontiguousarray(values)
    if array.ndim < 1 or array.dtype.kind not in "biufc":
        raise ValueError(f"table {field!r}: needs a numeric array with a first dimension "
                         f"(rows), got {array.dtype} {list(array.shape)}")
    return array


def write_table(root: Path, field: str, values) -> dict:
    """Write table `field` into dataset folder `root`; returns its manifest spec."""
    array = table_array(field, values)
    name = f"{field}.table.npy"
    entry = save_column(root / name, array, array.dtype.newbyteorder("<"))
    return {"kind": TABLE.name, "dtype": array.dtype.newbyteorder("<").str,
            "shape": list(array.shape), "file": name, **entry}


class _TableKind:
    name = "table"

    def declare(self, field: str, options: dict) -> dict:
        raise ValueError(f"field {field!r}: a table is not written per sample; pass it as "
                         f"ShardWriter(..., tables={{{field!r}: array}})")

    def infer(self, value) -> None:
        return None  # never chosen for a sample's value

    def complete(self, field: str, spec: dict, value) -> dict:
        return spec

    def check(self, field: str, spec: dict) -> str | None:
        if _unsafe(field):
            return f"table name {field!r} cannot name a file inside the dataset"
        try:
            np.dtype(spec["dtype"])
            ok = all(isinstance(d, int) and d >= 0 for d in spec["shape"]) and spec["file"] \
                == f"{field}.table.npy" and isinstance(spec["size"], int) and spec["size"] >= 0
        except (KeyError, TypeError):
            ok = False
        return None if ok else f"table {field!r} needs dtype, shape, its file and size (has {spec})"

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        return {}  # nothing inside the shards

    def encode(self, field: str, spec: dict, value, sample: int):
        raise ValueError(f"sample {sample}: field {field!r} is a table, not a per-sample field")

    def writer(self, folder: Path, stem: str, spec: dict):
        raise ValueError(f"table {stem!r} is written once by ShardWriter(tables=...)")

    def open(self, args: OpenArgs) -> TableReader:
        spec = args.spec
        if not args.folders:
            raise FormatError(f"table {args.field!r}: the dataset has no shards")
        path = inside(args.folders[0].parent, spec["file"], what=f"table {args.field!r}")
        try:
            table = np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise FormatError(f"{path}: missing (table {args.field!r}); restore it or "
                              "re-convert the dataset") from None
        except Exception as exc:  # noqa: BLE001 - a corrupt header fails in many ways in NumPy
            raise FormatError(f"{path}: not a readable .npy table ({type(exc).__name__}: "
                              f"{exc or 'empty'})") from None
        if list(table.shape) != list(spec["shape"]) or table.dtype != np.dtype(spec["dtype"]):
            raise FormatError(f"{path}: is {table.dtype} {list(table.shape)} but the manifest "
                              f"says {spec['dtype']} {spec['shape']}; restore it or re-convert")
        return TableReader(args.field, path, table)

    def describe(self, spec: dict) -> str:
        from chute.readers._sizes import format_size

        shape = "[" + ", ".join(str(d) for d in spec["shape"]) + "]"
        return (f"{self.name} {np.dtype(spec['dtype']).name} {shape} "
                f"({format_size(spec.get('size', 0))}, stored once)")


TABLE = _TableKind()
