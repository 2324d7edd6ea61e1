"""MosaicML Streaming (MDS) datasets as chute samples, read by their documented layout (no
`mosaicml-streaming` needed): `index.json` lists the shards, each shard file (raw, or
compressed whole with br, bz2, gz, snappy or zstd: `shard.00000.mds.zstd`) is

    uint32 n | uint32 offsets[n + 1] | (config JSON) | samples

and a sample is the uint32 sizes of its variable-size columns followed by every column's
bytes, in the order of `column_names`; a column's `column_encodings` entry says how its bytes
decode (streaming/base/format/mds/encodings.py)."""

from __future__ import annotations

import bz2
import gzip
import json
from collections.abc import Iterator
from decimal import Decimal
from functools import partial
from typing import Any

import numpy as np

from chute.convert._peer import (
    BYTES,
    IMAGE,
    JSON,
    NDARRAY,
    SCALAR,
    Column,
    PeerJob,
    image_bytes,
    json_value,
    parse_raw_image,
    read_source_file,
    source_name,
    text_value,
    unmappable,
)
from chute.errors import FormatError

__all__ = ["MDSJob", "convert_mds", "mds_columns", "MDS_MAPPING"]

_SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
            "float16", "float32", "float64")
# MDS's ndarray dtype codes (streaming's NDArray._int2value_dtype) and shape-dtype codes
_NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16",
                   32: "uint32", 33: "int32", 34: "float32", 64: "uint64", 65: "int64",
                   66: "float64"}
_SHAPE_DTYPES = {0: "<u1", 1: "<u2", 2: "<u4", 3: "<u8"}

# MDS encoding -> what it becomes in chute (the `--help` text and docs/coming-from.md)
MDS_MAPPING = {
    "jpeg": "bytes field (media image), JPEG bytes stored unchanged; + height/width",
    "png, pil": "bytes field (media image), transcoded to JPEG (--quality); + height/width",
    "bytes": "bytes field",
    "str, json, str_decimal": "json field (a str_decimal as its decimal string)",
    "int, int8..int64, uint8..uint64, float16..float64": "scalar column of that dtype",
    "str_int, str_float": "int64 / float64 scalar column",
    "ndarray:DTYPE:SHAPE": "ndarray field of that dtype and shape",
    "ndarray, ndarray:DTYPE": "ragged ndarray field (dtype of the first sample)",
    "pkl, list[...], jpeg_array": "refused (pickle is never unpickled): --drop COLUMN",
}


def _decompressor(algo: str | None):
    """bytes -> bytes for an MDS compression name ("zstd", "zstd:7", "gz", ...)."""
    family = (algo or "").split(":")[0]
    if not family:
        return None
    if family == "zstd":
        import zstandard

        def unzstd(data: bytes) -> bytes:
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        return unzstd
    if family == "gz":
        return gzip.decompress
    if family == "bz2":
        return bz2.decompress
    if family == "br":
        try:
            import brotli
        except ImportError:
            raise FormatError("MDS shards compressed with brotli (br) need the `Brotli` "
                              "package: pip install Brotli") from None
        return brotli.decompress
    if family == "snappy":
        try:
            import snappy
        except ImportError:
            raise FormatError("MDS shards compressed with snappy need the `python-snappy` "
                              "package: pip install python-snappy") from None
        return snappy.decompress
    raise FormatError(f"unknown MDS compression {algo!r} (MDS writes br, bz2, gz, snappy, "
                      "zstd)")


def _scalar(dtype: str):
    return partial(_scalar_value, "<" + np.dtype(dtype).str[1:])


def _scalar_value(dtype: str, data: bytes):
    return np.frombuffer(data, dtype)[0]


def _str_int(data: bytes) -> int:
    value = int(bytes(data).decode("utf-8"))
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"str_int {value} does not fit a 64-bit integer")
    return value


def _str_float(data: bytes) -> float:
    return float(bytes(data).decode("utf-8"))


def _str_decimal(data: bytes) -> str:
    return str(Decimal(bytes(data).decode("utf-8")))


def _ndarray(dtype: str | None, shape: tuple[int, ...] | None,
             data: bytes) -> np.ndarray:
    """MDS's NDArray layout: [dtype code: 1 byte, when not in the encoding] [ndim << 2 |
    shape dtype code: 1 byte, shape: ndim values, when not in the encoding] [values]."""
    view = memoryview(data)
    at = 0
    value_dtype = dtype
    if value_dtype is None:
        value_dtype = _NDARRAY_DTYPES[view[0]]
        at = 1
    dims = shape
    if dims is None:
        byte = view[at]
        ndim, code = byte >> 2, byte & 3
        size = ndim * (1 << code)
        dims = tuple(int(d) for d in np.frombuffer(view[at + 1:at + 1 + size],
                                                    _SHAPE_DTYPES[code]))
        at += 1 + size
    return np.frombuffer(view[at:], "<" + np.dtype(value_dtype).str[1:]).reshape(dims)


def mds_columns(src: str, names: list[str], encodings: list[str],
                drop: frozenset[str] = frozenset()) -> list[Column]:
    """The chute field of every MDS column (`drop`ped ones left out); FormatError in one line
    naming a column that maps to none."""
    columns = []
    for name, encoding in zip(names, encodings, strict=True):
        if name in drop:
            continue
        base, _, args = encoding.partition(":")
        if encoding == "jpeg":
            columns.append(Column(name, IMAGE, encoding, image_bytes))
        elif encoding == "png":
            columns.append(Column(name, IMAGE, encoding, image_bytes))
        elif encoding == "pil":
            columns.append(Column(name, IMAGE, encoding, parse_raw_image))
        elif encoding == "bytes":
            columns.append(Column(name, BYTES, encoding, bytes))
        elif encoding == "str":
            columns.append(Column(name, JSON, encoding, text_value))
        elif encoding == "json":
            columns.append(Column(name, JSON, encoding, json_value))
        elif encoding == "str_decimal":
            columns.append(Column(name, JSON, encoding, _str_decimal))
        elif encoding == "int":
            columns.append(Column(name, SCALAR, encoding, _scalar("int64"), dtype="int64"))
        elif encoding in _SCALARS:
            columns.append(Column(name, SCALAR, encoding, _scalar(encoding), dtype=encoding))
        elif encoding == "str_int":
            columns.append(Column(name, SCALAR, encoding, _str_int, dtype="int64"))
        elif encoding == "str_float":
            columns.append(Column(name, SCALAR, encoding, _str_float, dtype="float64"))
        elif base == "ndarray":
            parts = args.split(":") if args else []
            dtype = parts[0] if parts and parts[0] else None
            shape = tuple(int(d) for d in parts[1].split(",")) if len(parts) > 1 else None
            if dtype is not None and dtype not in _NDARRAY_DTYPES.values():
                raise unmappable(src, name, f"MDS {encoding!r} (an unknown dtype)",
                                 f"drop it with --drop {name}")
            columns.append(Column(name, NDARRAY, encoding, partial(_ndarray, dtype, shape),
                                  dtype=dtype, shape=shape))
        elif encoding == "pkl":
            raise unmappable(src, name, "pickled (MDS 'pkl')",
                             f"chute never unpickles a dataset's data: drop it with --drop "
                             f"{name}, or write it in MDS as json or ndarray")
        else:
            raise unmappable(src, name, f"MDS {encoding!r}",
                             f"drop it with --drop {name}, or write it in MDS as one column "
                             "per image (jpeg, png), json or ndarray")
    return columns


def _load_index(src: str) -> list[dict]:
    raw = read_source_file(src, "index.json", "the MDS index")
    try:
        index = json.loads(raw)
        shards = index["shards"]
        if not isinstance(shards, list):
            raise TypeError("'shards' is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"{src}/index.json: not an MDS index ({type(exc).__name__}: "
                          f"{exc})") from None
    for i, shard in enumerate(shards):
        if shard.get("format") != "mds":
            raise FormatError(f"{src}/index.json: shard {i} is in format "
                              f"{shard.get('format')!r}; `chute convert mds` reads MDS shards "
                              "(MDSWriter), not streaming's CSV/TSV/JSON writers")
    return shards


def _same_columns(src: str, shards: list[dict]) -> tuple[list[str], list[str]]:
    first = shards[0]
    names, encodings = list(first["column_names"]), list(first["column_encodings"])
    for i, shard in enumerate(shards):
        if list(shard["column_names"]) != names or list(shard["column_encodings"]) != encodings:
            raise FormatError(f"{src}/index.json: shard {i} has other columns than shard 0 "
                              f"({shard['column_names']} vs {names}); convert the datasets one "
                              "at a time")
    return names, encodings


class MDSJob(PeerJob):
    """The shards of an MDS dataset as units, in the order of its index.json.

    Args:
        src: the dataset folder (holding index.json) or an s3:// prefix.
        options: a ConvertOptions (max_side, quality, strict, shard_size, overwrite, ...).
        drop: columns not converted.
    """

    kind = "mds"
    unit = "shard"

    def __init__(self, src, options, drop=()):
        self.src = source_name(src)
        shards = _load_index(self.src)
        if not shards:
            raise FormatError(f"{self.src}/index.json lists no shards")
        names, encodings = _same_columns(self.src, shards)
        unknown = sorted(set(drop) - set(names))
        if unknown:
            raise FormatError(f"{self.src}: --drop {unknown[0]}: no such column (it has "
                              f"{names})")
        self.columns = mds_columns(self.src, names, encodings, frozenset(drop))
        if not self.columns:
            raise FormatError(f"{self.src}: every column is dropped")
        self.names, self.encodings = names, encodings
        self.units = [{"raw": s["raw_data"]["basename"],
                       "zip": (s.get("zip_data") or {}).get("basename"),
                       "compression": s.get("compression"), "samples": int(s["samples"]),
                       "sizes": s["column_sizes"], "first": first}
                      for s, first in zip(shards, np.cumsum([0] + [int(s["samples"])
                                                                   for s in shards]).tolist(),
                                          strict=False)]
        self.setup_fields(options)

    def _shard_bytes(self, unit: dict) -> bytes:
        """The raw shard: its raw file where the folder has it (StreamingDataset leaves
        decompressed copies), else its compressed file, decompressed."""
        if unit["zip"] is None:
            return read_source_file(self.src, unit["raw"], "an MDS shard")
        try:
            return read_source_file(self.src, unit["raw"], "an MDS shard")
        except FormatError:
            pass
        data = read_source_file(self.src, unit["zip"], "an MDS shard")
        decompress = _decompressor(unit["compression"])
        try:
            return decompress(data) if decompress else data
        except Exception as exc:  # noqa: BLE001  (each library raises its own)
            raise FormatError(f"{self.src}/{unit['zip']}: does not decompress with "
                              f"{unit['compression']} ({type(exc).__name__}: {exc})") from None

    def samples(self, unit: dict) -> Iterator[tuple[str, dict[str, bytes]]]:
        data = self._shard_bytes(unit)
        name = unit["zip"] or unit["raw"]
        view = memoryview(data)
        try:
            n = int(np.frombuffer(view[:4], "<u4")[0])
            offsets = np.frombuffer(view[4:4 + 4 * (n + 1)], "<u4").astype(np.int64)
            if len(offsets) != n + 1 or offsets[-1] > len(data) or np.any(np.diff(offsets) < 0):
                raise ValueError("its offsets point past its end")
        except (ValueError, IndexError) as exc:
            raise FormatError(f"{self.src}/{name}: not an MDS shard ({exc})") from None
        if n != unit["samples"]:
            raise FormatError(f"{self.src}/{name}: holds {n} samples, index.json says "
                              f"{unit['samples']}")
        sizes = unit["sizes"]
        variable = sum(1 for s in sizes if not s)
        for i in range(n):
            record = view[offsets[i]:offsets[i + 1]]
            key = f"{name}:{i}"
            head = np.frombuffer(record[:4 * variable], "<u4")
            lengths: list[int] = []
            v = 0
            for size in sizes:
                if size:
                    lengths.append(int(size))
                else:
                    lengths.append(int(head[v]))
                    v += 1
            at = 4 * variable
            if at + sum(lengths) > len(record):
                raise FormatError(f"{self.src}/{name}: sample {i} is truncated")
            values: dict[str, Any] = {}
            for column, length in zip(self.names, lengths, strict=True):
                values[column] = record[at:at + length]
                at += length
            yield key, values

    def source_info(self, report) -> dict[str, Any]:
        return {"kind": self.kind, **self.info, **report.actions,
                "skipped": len(report.skipped)}


def convert_mds(src, dst, options=None, *, drop=(), engine=None):
    """A MosaicML Streaming (MDS) dataset -> a chute dataset, sample i to sample i.

    Every column becomes a field of the same name (MDS_MAPPING says which kind): JPEG images
    are stored as they are, PNG and raw PIL images transcoded to JPEG (`options.quality`),
    with height/width columns for the first image column; numbers become scalar columns of
    their dtype, arrays ndarray fields, str and json json fields, bytes bytes fields. A pickled
    column (`pkl`) is refused, never unpickled; `drop` leaves such columns out. Read by MDS's
    documented layout: `mosaicml-streaming` is not needed.

    Args:
        src: the folder holding index.json (or an s3:// prefix).
        dst: the new dataset (folder or s3://...).
        options: a ConvertOptions (workers does not apply).
        drop: names of columns not to convert.
        engine: where to run it (None: this process; `chute.ray.RayEngine`: one task per
            group of shards).

    Returns:
        A ConvertReport (written, actions, skipped, report_path).

    Raises:
        FormatError: no index.json, a column no chute kind holds (named), a corrupt shard.
    """
    from chute.convert._convert import ConvertOptions
    from chute.convert._jobs import run_job

    job = MDSJob(src, options or ConvertOptions(), drop)
    return run_job(job, dst, engine=engine)
