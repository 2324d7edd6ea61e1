"""Kind `scalar`: one number per sample (labels, image heights/widths, frame counts) in a
memory-mapped `.npy` column per shard."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from chute.errors import ChuteError, FormatError
from chute.readers.kinds._kind import Encoded, OpenArgs
from chute.readers.storage._files import TOO_MANY_FILES, atomic_write_bytes, map_npy

__all__ = ["SCALAR", "load_column", "save_column"]


def load_column(path: Path, count: int, dtype) -> np.ndarray:
    """A memory-mapped 1-D .npy column of `count` values (checked against the manifest)."""
    try:
        column = map_npy(path)  # holds no descriptor: many shards stay under ulimit -n
    except FileNotFoundError:
        raise FormatError(f"{path}: missing; restore the shard or re-convert") from None
    except OSError as exc:
        if exc.errno in TOO_MANY_FILES:  # the process's limit, not the file: said as itself
            raise ChuteError(f"{path}: cannot open it: too many open files ({exc.strerror}); "
                             "raise the limit (ulimit -n), the dataset is not at fault") from None
        raise FormatError(f"{path}: not a readable .npy column ({type(exc).__name__}: "
                          f"{exc or 'empty'})") from None
    except Exception as exc:  # noqa: BLE001 - a corrupt header fails in many ways inside NumPy
        raise FormatError(f"{path}: not a readable .npy column ({type(exc).__name__}: "
                          f"{exc or 'empty'})") from None
    if column.ndim != 1 or len(column) != count:
        raise FormatError(f"{path}: has shape {column.shape} but the manifest says {count} "
                          "samples; the column does not belong to this manifest")
    if dtype is not None and column.dtype != np.dtype(dtype):
        raise FormatError(f"{path}: dtype {column.dtype} but the manifest says {dtype}")
    return column


def save_column(path: Path, values, dtype) -> dict:
    buf = io.BytesIO()
    np.save(buf, np.array(values, dtype=dtype), allow_pickle=False)
    return atomic_write_bytes(path, buf.getvalue())


class ScalarReader:
    sample_shape: tuple[int, ...] = ()

    def __init__(self, parts: list[np.ndarray], dtype: np.dtype):
        self.parts = parts
        self.dtype = dtype
        self._column: np.ndarray | None = None

    def column(self) -> np.ndarray:
        """All values in global order (read-only; concatenated once)."""
        if self._column is None:
            column = np.concatenate(self.parts) if self.parts else np.empty(0, self.dtype)
            column.flags.writeable = False
            self._column = column
        return self._column

    def get(self, shard: int, local: int, global_id: int):
        return self.parts[shard][local]

    def read(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.take(self.column(), ids, out=out)


class _ScalarColumn:
    def __init__(self, path: Path, dtype: str):
        self.path = path
        self.dtype = dtype
        self.values: list = []

    def add(self, encoded: Encoded) -> None:
        self.values.append(encoded.data)

    def commit(self) -> dict[str, dict]:
        return {self.path.name: save_column(self.path, self.values, self.dtype)}

    def abort(self) -> None:
        self.values = []


class _ScalarKind:
    name = "scalar"

    def declare(self, field: str, options: dict) -> dict:
        spec = options.get("dtype")
        try:
            dtype = np.dtype(spec)
        except TypeError:
            raise ValueError(f"field {field!r}: {spec!r} is neither a field kind ('bytes', "
                             "'json', 'ndarray') nor a NumPy dtype such as 'int64'") from None
        if dtype.kind not in "biuf":
            raise ValueError(f"field {field!r}: a scalar column holds numbers, not {dtype}")
        return {"kind": self.name, "dtype": dtype.newbyteorder("<").str}

    def infer(self, value) -> dict | None:
        if isinstance(value, bool):
            return {"kind": self.name, "dtype": "bool"}
        if isinstance(value, int):
            return {"kind": self.name, "dtype": "int64"}
        if isinstance(value, float):
            return {"kind": self.name, "dtype": "float64"}
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return {"kind": self.name, "dtype": value.dtype.str}
        return None

    def complete(self, field: str, spec: dict, value) -> dict:
        return spec

    def check(self, field: str, spec: dict) -> str | None:
        try:
            dtype = np.dtype(spec["dtype"])
            if dtype.kind not in "biuf" or dtype.byteorder == ">":
                raise ValueError
        except (KeyError, TypeError, ValueError):
            return (f"field {field!r} needs a little-endian numeric dtype, has "
                    f"{spec.get('dtype')!r}")
        return None

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        return {f"{stem}.npy": "columns"}

    def encode(self, field: str, spec: dict, value, sample: int) -> Encoded:
        dtype = spec["dtype"]
        given = np.asarray(value)
        if given.ndim != 0:
            raise ValueError(f"sample {sample} field {field!r}: a scalar column needs one "
                             f"number, got shape {given.shape}")
        try:
            # integers into an unsigned column: int64 -> uint16 is no "same kind" cast for
            # NumPy; the check below refuses negative and too large values instead
            integral = given.dtype.kind in "iu" and np.dtype(dtype).kind == "u"
            cast = given.astype(dtype, casting="unsafe" if integral else "same_kind")
        except TypeError:
            raise ValueError(f"sample {sample} field {field!r}: {value!r} does not fit the "
                             f"column type {np.dtype(dtype).name}") from None
        if cast.dtype.kind in "iub" and cast != given:
            raise ValueError(f"sample {sample} field {field!r}: {value!r} overflows "
                             f"{np.dtype(dtype).name}")
        return Encoded(cast, 0)

    def writer(self, folder: Path, stem: str, spec: dict) -> _ScalarColumn:
        return _ScalarColumn(folder / f"{stem}.npy", spec["dtype"])

    def open(self, args: OpenArgs) -> ScalarReader:
        dtype = args.spec.get("dtype")
        parts = [load_column(folder / f"{args.stem}.npy", count, dtype)
                 for folder, count in zip(args.folders, args.counts, strict=True)]
        return ScalarReader(parts, np.dtype(dtype) if dtype else np.dtype(np.int64))

    def describe(self, spec: dict) -> str:
        return f"{self.name} {np.dtype(spec['dtype']).name}"


SCALAR = _ScalarKind()
