"""litdata optimized datasets (`litdata.optimize`, `BinaryWriter`) as chute samples, read by
their on-disk layout (no `litdata` needed, except for one column encoding below):
`index.json` holds "chunks" (their files and item counts, in order) and "config" (the
"data_format" of every leaf of a sample, the "data_spec" pytree that names the leaves, the
"compression"). A chunk file is

    uint32 n | uint32 offsets[n + 1] | items

(zstd-compressed whole with compression_level "chunk"; each item its own zstd frame with
"sample"; "batch" chunks start with b"LDFZ01" and hold zstd frames of consecutive items), and
an item is the uint32 sizes of its leaves followed by their bytes, each decoded by the
serializer its data_format names (litdata/streaming/serializers.py).

litdata's "json" leaves (nested dicts and lists) are a binary encoding of litdata's own
(plain JSON in older versions): plain JSON is read here, the binary form with litdata's own
decoder when `litdata` is installed (else the column is refused, naming it)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
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
    parse_raw_image,
    read_source_file,
    source_name,
    text_value,
    unmappable,
)
from chute.errors import FormatError

__all__ = ["LitdataJob", "convert_litdata", "litdata_columns", "LITDATA_MAPPING"]

# litdata's _NUMPY_DTYPES_MAPPING (constants.py): index -> dtype; past 10 nothing chute holds
_NUMPY = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "complex64", "complex128", "bool"]
# litdata's _TORCH_DTYPES_MAPPING: index -> dtype (10: bfloat16, which NumPy has not)
_TORCH = {0: "float32", 1: "float32", 2: "float64", 3: "float64", 4: "complex64",
          5: "complex64", 6: "complex128", 7: "complex128", 8: "float16", 9: "float16",
          11: "uint8", 12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32",
          17: "int64", 18: "int64", 19: "bool", 20: "uint16"}
_FRAMED_MAGIC = b"LDFZ01\0\0"
_FRAMED_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")

LITDATA_MAPPING = {
    "jpeg (a JpegImageFile), image:jpg": "bytes field (media image), JPEG bytes stored "
                                         "unchanged; + height/width",
    "image:png/webp/..., pil": "bytes field (media image), transcoded to JPEG (--quality); + "
                               "height/width",
    "bytes": "bytes field",
    "str, text, json": "json field",
    "int, float, bool": "int64 / float64 / bool scalar column",
    "numpy, tensor": "ragged ndarray field (dtype of the first sample; bfloat16 refused)",
    "no_header_numpy, no_header_tensor (1-D)": "ragged ndarray field of that dtype",
    "pickle, video, audio, file, tiff, ...": "refused (pickle is never unpickled): --drop COLUMN",
}


def _leaf_names(spec: Any, prefix: str = "") -> list[str]:
    """Field names of the leaves of a serialized torch pytree spec (dict keys joined with
    ".", list and tuple positions as numbers)."""
    kind, children = spec.get("type"), spec.get("children_spec") or []
    if kind is None:
        return [prefix or "value"]
    if kind in ("builtins.dict", "collections.OrderedDict"):
        keys = json.loads(spec["context"])
    elif kind in ("builtins.list", "builtins.tuple"):
        keys = list(range(len(children)))
    else:
        raise FormatError(f"a sample holds a {kind}; `chute convert litdata` reads samples "
                          "that are dicts, lists or tuples of values")
    names = []
    for key, child in zip(keys, children, strict=True):
        names += _leaf_names(child, f"{prefix}.{key}" if prefix else str(key))
    return names


def _numpy(data: bytes) -> np.ndarray:
    """litdata's NumpySerializer: uint32 dtype index, uint32 ndim, uint32 dims, values."""
    head = np.frombuffer(data[:8], "<u4")
    dtype = np.dtype(_NUMPY[int(head[0])])
    dims = tuple(int(d) for d in np.frombuffer(data[8:8 + 4 * int(head[1])], "<u4"))
    return np.frombuffer(data[8 + 4 * len(dims):], dtype).reshape(dims)


def _tensor(data: bytes) -> np.ndarray:
    """litdata's TensorSerializer: big-endian uint32 dtype index and rank, big-endian uint32
    dims, values."""
    dtype_index, rank = struct.unpack_from(">II", data, 0)
    if dtype_index not in _TORCH:
        raise ValueError(f"torch dtype index {dtype_index} (bfloat16) has no NumPy dtype")
    dims = struct.unpack_from(f">{rank}I", data, 8)
    return np.frombuffer(data[8 + 4 * rank:], _TORCH[dtype_index]).reshape(dims)


def _flat(dtype: str):
    return partial(np.frombuffer, dtype=dtype)


def _int(data: bytes) -> int:
    return struct.unpack("<q", data)[0]


def _float(data: bytes) -> float:
    return struct.unpack("<d", data)[0]


def _bool(data: bytes) -> bool:
    return data[0] != 0


def _json_decoder(src: str, name: str):
    return partial(_json_value, src, name)


def _json_value(src: str, name: str, data: bytes) -> Any:
    raw = bytes(data)
    if not raw or raw[0] > 0x20:  # plain JSON (litdata before its binary encoding)
        return json.loads(raw.decode("utf-8"))
    try:
        from litdata.streaming.serializers import JsonSerializer
    except ImportError:
        raise unmappable(src, name, "litdata's binary-encoded json",
                         f"install litdata (pip install litdata) to decode it, or drop it "
                         f"with --drop {name}") from None
    return JsonSerializer().deserialize(raw)


def litdata_columns(src: str, names: list[str], formats: list[str],
                    drop: frozenset[str] = frozenset()) -> list[Column]:
    """The chute field of every litdata leaf (`drop`ped ones left out); FormatError in one
    line naming a leaf that maps to none."""
    columns = []
    for name, fmt in zip(names, formats, strict=True):
        if name in drop:
            continue
        base, _, arg = fmt.partition(":")
        if fmt == "jpeg" or base == "image":
            columns.append(Column(name, IMAGE, fmt, image_bytes))
        elif fmt == "pil":
            columns.append(Column(name, IMAGE, fmt, parse_raw_image))
        elif fmt == "bytes":
            columns.append(Column(name, BYTES, fmt, bytes))
        elif fmt in ("str", "text"):
            columns.append(Column(name, JSON, fmt, text_value))
        elif fmt == "json":
            columns.append(Column(name, JSON, fmt, _json_decoder(src, name)))
        elif fmt == "int":
            columns.append(Column(name, SCALAR, fmt, _int, dtype="int64"))
        elif fmt == "float":
            columns.append(Column(name, SCALAR, fmt, _float, dtype="float64"))
        elif fmt == "bool":
            columns.append(Column(name, SCALAR, fmt, _bool, dtype="bool"))
        elif fmt == "numpy":
            columns.append(Column(name, NDARRAY, fmt, _numpy))
        elif fmt == "tensor":
            columns.append(Column(name, NDARRAY, fmt, _tensor))
        elif base == "no_header_numpy" and arg.isdigit() and int(arg) < len(_NUMPY):
            dtype = _NUMPY[int(arg)]
            columns.append(Column(name, NDARRAY, fmt, _flat(dtype), dtype=dtype))
        elif base == "no_header_tensor" and arg.isdigit() and int(arg) in _TORCH:
            dtype = _TORCH[int(arg)]
            columns.append(Column(name, NDARRAY, fmt, _flat(dtype), dtype=dtype))
        elif fmt == "pickle":
            raise unmappable(src, name, "pickled (litdata 'pickle')",
                             f"chute never unpickles a dataset's data: drop it with --drop "
                             f"{name}, or optimize it as a dict, list, number, str or array")
        else:
            raise unmappable(src, name, f"litdata {fmt!r}",
                             f"drop it with --drop {name}, or optimize it as a JPEG/PIL image, "
                             "bytes, str, number, NumPy array or tensor")
    return columns


class LitdataJob(PeerJob):
    """The chunks of a litdata optimized dataset as units, in the order of its index.json.

    Args:
        src: the dataset folder (holding index.json) or an s3:// prefix.
        options: a ConvertOptions (max_side, quality, strict, shard_size, overwrite, ...).
        drop: leaves (columns) not converted, by their field name.
    """

    kind = "litdata"
    unit = "chunk"

    def __init__(self, src, options, drop=()):
        self.src = source_name(src)
        raw = read_source_file(self.src, "index.json", "the litdata index")
        try:
            index = json.loads(raw)
            config, chunks = index["config"], index["chunks"]
            formats = list(config["data_format"])
            spec = json.loads(config["data_spec"])
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatError(f"{self.src}/index.json: not a litdata index "
                              f"({type(exc).__name__}: {exc})") from None
        if config.get("encryption"):
            raise FormatError(f"{self.src}: the chunks are encrypted; decrypt them with litdata "
                              "(optimize again without encryption) first")
        loader = config.get("item_loader") or "PyTreeLoader"
        if loader != "PyTreeLoader":
            raise FormatError(f"{self.src}: items written for litdata's {loader} (token "
                              "streams, time series); `chute convert litdata` reads the "
                              "default PyTreeLoader's samples")
        if config.get("compression") not in (None, "zstd") and \
                not str(config.get("compression")).startswith("zstd"):
            raise FormatError(f"{self.src}: compression {config.get('compression')!r}; litdata "
                              "writes zstd, which is what `chute convert litdata` reads")
        try:
            names = _leaf_names(spec[1] if isinstance(spec, list) else spec)
        except FormatError as exc:
            raise FormatError(f"{self.src}: {exc}") from None
        if len(names) != len(formats):
            raise FormatError(f"{self.src}/index.json: {len(formats)} data formats for "
                              f"{len(names)} leaves")
        unknown = sorted(set(drop) - set(names))
        if unknown:
            raise FormatError(f"{self.src}: --drop {unknown[0]}: no such column (it has "
                              f"{names})")
        self.names, self.formats = names, formats
        self.columns = litdata_columns(self.src, names, formats, frozenset(drop))
        if not self.columns:
            raise FormatError(f"{self.src}: every column is dropped")
        self.compression = config.get("compression")
        self.level = config.get("compression_level") or "chunk"
        self.units = [{"file": c["filename"], "items": int(c["chunk_size"])} for c in chunks]
        self.setup_fields(options)

    def _items(self, unit: dict) -> list[memoryview]:
        name = unit["file"]
        data = read_source_file(self.src, name, "a litdata chunk")
        try:
            if data[:8] == _FRAMED_MAGIC:
                return _framed_items(data)
            if self.compression and self.level == "chunk":
                import zstandard

                data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
            items = _classic_items(data)
            if self.compression and self.level == "sample":
                import zstandard

                items = [memoryview(zstandard.ZstdDecompressor().decompressobj()
                                    .decompress(bytes(item))) for item in items]
        except (ValueError, IndexError, struct.error) as exc:
            raise FormatError(f"{self.src}/{name}: not a litdata chunk "
                              f"({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # noqa: BLE001  (zstandard.ZstdError)
            raise FormatError(f"{self.src}/{name}: does not decompress "
                              f"({type(exc).__name__}: {exc})") from None
        if len(items) != unit["items"]:
            raise FormatError(f"{self.src}/{name}: holds {len(items)} items, index.json says "
                              f"{unit['items']}")
        if items and all(len(item) == 0 for item in items):
            raise FormatError(f"{self.src}/{name}: its items are stored only in an Arrow "
                              "footer (litdata's nested JSON rows), which `chute convert "
                              "litdata` does not read; optimize the nested values as json")
        return items

    def samples(self, unit: dict) -> Iterator[tuple[str, dict[str, bytes]]]:
        leaves = len(self.formats)
        for i, item in enumerate(self._items(unit)):
            key = f"{unit['file']}:{i}"
            sizes = np.frombuffer(item[:4 * leaves], "<u4")
            at = 4 * leaves
            if len(sizes) != leaves or at + int(sizes.sum()) > len(item):
                raise FormatError(f"{self.src}/{unit['file']}: item {i} is truncated")
            values: dict[str, Any] = {}
            for name, size in zip(self.names, sizes.tolist(), strict=True):
                values[name] = item[at:at + size]
                at += size
            yield key, values


def _classic_items(data: bytes) -> list[memoryview]:
    view = memoryview(data)
    n = int(np.frombuffer(view[:4], "<u4")[0])
    offsets = np.frombuffer(view[4:4 + 4 * (n + 1)], "<u4").astype(np.int64)
    if len(offsets) != n + 1 or offsets[-1] > len(data) or np.any(np.diff(offsets) < 0):
        raise ValueError("its offsets point past its end")
    return [view[offsets[i]:offsets[i + 1]] for i in range(n)]


def _framed_items(data: bytes) -> list[memoryview]:
    """A "batch"-compressed chunk: prefix (magic, version, flags, n, rows per frame, frames),
    uint32 offsets[n + 1] into the items' bytes, the frame table (first item, items,
    file offset, compressed and uncompressed length) and the zstd frames."""
    import zstandard

    _magic, version, _flags, n, _rows, n_frames = _FRAMED_PREFIX.unpack_from(data, 0)
    if version != 1:
        raise ValueError(f"framed zstd version {version} (chute reads version 1)")
    at = _FRAMED_PREFIX.size
    offsets = np.frombuffer(data[at:at + 4 * (n + 1)], "<u4").astype(np.int64)
    at += 4 * (n + 1)
    payload = []
    for f in range(n_frames):
        _first, _items, off, clen, ulen = _FRAME.unpack_from(data, at + f * _FRAME.size)
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(data[off:off + clen])
        if len(raw) != ulen:
            raise ValueError(f"frame {f} inflates to {len(raw)} bytes, not {ulen}")
        payload.append(raw)
    view = memoryview(b"".join(payload))
    if len(offsets) != n + 1 or offsets[-1] > len(view):
        raise ValueError("its offsets point past its items")
    return [view[offsets[i]:offsets[i + 1]] for i in range(n)]


def convert_litdata(src, dst, options=None, *, drop=(), engine=None):
    """A litdata optimized dataset -> a chute dataset, sample i to sample i.

    Every leaf of a sample becomes a field named by its path in the sample ("image",
    "meta.a"; LITDATA_MAPPING says which kind): JPEG images are stored as they are, PNG and
    PIL images transcoded to JPEG (`options.quality`), with height/width columns for the
    first image column; int/float/bool become scalar columns, NumPy arrays and tensors
    ndarray fields, str and json json fields, bytes bytes fields. A pickled leaf is refused,
    never unpickled; `drop` leaves such columns out. Read by litdata's on-disk layout
    (`litdata` is needed only for its binary-encoded json leaves).

    Args:
        src: the folder holding index.json (or an s3:// prefix).
        dst: the new dataset (folder or s3://...).
        options: a ConvertOptions (workers does not apply).
        drop: names of columns not to convert.
        engine: where to run it (None: this process; `chute.ray.RayEngine`).

    Returns:
        A ConvertReport (written, actions, skipped, report_path).

    Raises:
        FormatError: no index.json, a leaf no chute kind holds (named), a corrupt chunk.
    """
    from chute.convert._convert import ConvertOptions
    from chute.convert._jobs import run_job

    job = LitdataJob(src, options or ConvertOptions(), drop)
    return run_job(job, dst, engine=engine)
