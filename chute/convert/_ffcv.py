"""FFCV `.beton` files as chute samples, read by the format's layout (no `ffcv` needed):

    header (version 2, field count, page size, sample count, allocation table offset)
    | one 1041-byte descriptor per field (type id, 16-byte name, 1024 bytes of arguments)
    | the metadata table (one aligned record per sample, one member per field)
    | pages of payloads (images, bytes, arrays) | the allocation table (sample, offset, size)

Scalars live in the metadata record; the other fields hold the file offset of their payload,
whose size the allocation table records. Every offset and size is checked against the file
before a sample is written, so a truncated or corrupt file stops the convert in one line."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
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
    _Skip,
)
from chute.errors import FormatError

__all__ = ["FFCVJob", "convert_ffcv", "FFCV_MAPPING"]

# FFCV field -> what it becomes in chute (the `--help` text and docs/cli.md)
FFCV_MAPPING = {
    "RGBImageField": "bytes field (media image) + height/width: JPEG samples stored byte for "
                     "byte, raw-pixel samples encoded as PNG (lossless; --max-side re-encodes "
                     "both as JPEG)",
    "IntField": "int64 scalar column",
    "FloatField": "float64 scalar column",
    "NDArrayField, TorchTensorField": "ndarray field of that dtype and shape",
    "BytesField": "bytes field",
    "JSONField": "json field",
    "custom Field (type id 255)": "refused: its layout is known only to its own code",
}

_VERSION = 2
_HEADER = np.dtype([("version", "<u2"), ("num_fields", "<u2"), ("page_size", "<u4"),
                    ("num_samples", "<u8"), ("alloc_table_ptr", "<u8")], align=True)
_DESCRIPTOR = np.dtype([("type_id", "<u1"), ("name", "<u1", 16),
                        ("arguments", "<u1", 1024)], align=True)
_ALLOCATION = np.dtype([("sample_id", "<u8"), ("ptr", "<u8"), ("size", "<u8")])
_POINTER = np.dtype([("ptr", "<u8"), ("size", "<u8")])
_IMAGE = np.dtype([("mode", "<u1"), ("width", "<u2"), ("height", "<u2"), ("data_ptr", "<u8")])
# the ndarray arguments: 32 dimensions (0 past the last), then the length of the JSON dtype
_ARRAY_ARGS = np.dtype([("shape", "<u8", 32), ("type_length", "<u8")])
_JPEG, _RAW = 0, 1
# type id -> (field class, metadata member)
_TYPES: dict[int, tuple[str, Any]] = {
    0: ("FloatField", np.dtype("<f8")), 1: ("IntField", np.dtype("<i8")),
    2: ("RGBImageField", _IMAGE), 3: ("BytesField", _POINTER),
    4: ("NDArrayField", np.dtype("<u8")), 5: ("JSONField", _POINTER),
    6: ("TorchTensorField", np.dtype("<u8")),
}
_SAMPLES_PER_UNIT = 4096


def _corrupt(path: str, what: str) -> FormatError:
    return FormatError(f"{path}: {what}; the .beton file is truncated or corrupt, write it "
                       "again with FFCV's DatasetWriter")


def _read(path: str, fd: int, at: int, size: int) -> bytes:
    """`size` bytes at `at`; a file that ends before them (it shrank since it was checked) is
    named in one line."""
    data = os.pread(fd, size, at)
    if len(data) != size:
        raise _corrupt(path, f"it ends at byte {at + len(data)}, inside the {size} bytes at "
                       f"{at}")
    return data


@functools.lru_cache(maxsize=2)
def _payload_sizes(path: str, table_at: int, size: int,
                   mtime_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The allocation table's payload offsets, sorted, and their sizes: read once per process
    and file version (size, mtime_ns), as every run of samples looks its payloads up in it."""
    with open(path, "rb") as f:
        table = np.frombuffer(_read(path, f.fileno(), table_at, size - table_at), _ALLOCATION)
    order = np.argsort(table["ptr"], kind="stable")
    return table["ptr"][order], table["size"][order]


def _same(value: Any) -> Any:
    return value


def _json_payload(data: bytes) -> Any:
    """FFCV's JSONField payload: the JSON text in UTF-8, ended by one NUL byte."""
    data = bytes(data)
    if not data.endswith(b"\0"):
        raise ValueError("the JSON payload does not end with its NUL byte")
    return json.loads(data[:-1].decode("utf-8"))


# field class -> (chute kind, payload or metadata value -> value, scalar dtype)
_PLAIN: dict[str, tuple[str, Any, str | None]] = {
    "RGBImageField": (IMAGE, _same, None), "IntField": (SCALAR, _same, "int64"),
    "FloatField": (SCALAR, _same, "float64"), "BytesField": (BYTES, bytes, None),
    "JSONField": (JSON, _json_payload, None),
}


def _array(dtype: str, shape: tuple[int, ...], data: bytes) -> np.ndarray:
    array = np.frombuffer(data, np.dtype(dtype)).reshape(shape)
    # big-endian arrays stored as little-endian ones of the same values
    return array.astype(array.dtype.newbyteorder("="), copy=False)


def _array_field(path: str, name: str, arguments: np.ndarray) -> tuple[np.dtype, tuple]:
    """The dtype and shape an NDArrayField's arguments state."""
    args = arguments[:_ARRAY_ARGS.itemsize].view(_ARRAY_ARGS)[0]
    dims = [int(d) for d in args["shape"]]
    while dims and dims[-1] == 0:
        dims.pop()
    length = int(args["type_length"])
    if not 0 < length <= len(arguments) - _ARRAY_ARGS.itemsize:
        raise _corrupt(path, f"field {name!r}: its dtype description is {length} bytes long")
    text = arguments[_ARRAY_ARGS.itemsize:_ARRAY_ARGS.itemsize + length].tobytes()
    try:
        descr = json.loads(text.decode("ascii"))
        if len(descr) != 1:
            raise ValueError(f"{len(descr)} members")
        dtype = np.dtype(str(descr[0][1]))
    except (ValueError, TypeError, IndexError) as exc:
        raise _corrupt(path, f"field {name!r}: its dtype {text[:60]!r} does not parse "
                       f"({exc})") from None
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise FormatError(f"{path}: field {name!r} is an NDArrayField of dtype {dtype.str}, "
                          f"which no chute ndarray holds (bool, int, uint, float); convert "
                          f"without it (--drop {name})")
    return dtype, tuple(dims)


def _read_layout(path: str) -> dict[str, Any]:
    """Header, field descriptors and the offsets that bound the metadata table and the
    allocation table, checked against the file size."""
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            head = f.read(_HEADER.itemsize)
            if len(head) < _HEADER.itemsize:
                raise _corrupt(path, f"{size} bytes, shorter than the FFCV header")
            header = np.frombuffer(head, _HEADER)[0]
            if int(header["version"]) != _VERSION:
                raise FormatError(f"{path}: FFCV format version {int(header['version'])}; "
                                  f"chute reads version {_VERSION} (ffcv 0.0.3 to 1.0), "
                                  "write it again with a current FFCV (or it is not a .beton "
                                  "file)")
            n_fields = int(header["num_fields"])
            raw = f.read(n_fields * _DESCRIPTOR.itemsize)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the FFCV file ({exc.strerror or exc})") from None
    if len(raw) < n_fields * _DESCRIPTOR.itemsize:
        raise _corrupt(path, f"it ends inside its {n_fields} field descriptors")
    page = int(header["page_size"])
    if page <= 0 or page & (page - 1):
        raise _corrupt(path, f"its page size {page} is not a power of two")
    return {"size": size, "header": header,
            "descriptors": np.frombuffer(raw, _DESCRIPTOR),
            "metadata_at": _HEADER.itemsize + n_fields * _DESCRIPTOR.itemsize}


def _field_name(path: str, raw: np.ndarray) -> str:
    try:
        return raw.tobytes().split(b"\0")[0].decode("ascii")
    except UnicodeDecodeError:
        raise _corrupt(path, f"a field name {raw.tobytes()!r} is not ASCII") from None


def _columns(path: str, descriptors: np.ndarray, drop: frozenset[str]):
    """(every field's name and metadata member, the columns converted)."""
    names: list[str] = []
    members: list[Any] = []
    columns: list[Column] = []
    for descriptor in descriptors:
        name = _field_name(path, descriptor["name"])
        type_id = int(descriptor["type_id"])
        if name in names:
            raise FormatError(f"{path}: two fields are named {name!r} (FFCV keeps the first 16 "
                              "characters of a name); write it again with shorter names")
        if type_id not in _TYPES:
            raise FormatError(f"{path}: field {name!r} has FFCV type id {type_id} (a custom "
                              "Field class), whose record layout only its own code knows, so "
                              "no field of this file can be located; write the dataset again "
                              "with FFCV's built-in fields (RGBImageField, IntField, "
                              "FloatField, NDArrayField, BytesField, JSONField)")
        field_class, member = _TYPES[type_id]
        names.append(name)
        members.append(member)
        if name in drop:
            continue
        if field_class in _PLAIN:
            kind, decode, dtype_name = _PLAIN[field_class]
            columns.append(Column(name, kind, field_class, decode, dtype=dtype_name))
        else:
            dtype, shape = _array_field(path, name, descriptor["arguments"])
            native = dtype.newbyteorder("=")
            columns.append(Column(name, NDARRAY, field_class,
                                  partial(_array, dtype.str, shape),
                                  dtype=native.name, shape=shape))
    record = np.dtype([(f"f{i}", m) for i, m in enumerate(members)], align=True)
    return names, record, columns


class FFCVJob(PeerJob):
    """The samples of an FFCV `.beton` file, in its order, in runs of 4096 (the units).

    Args:
        src: the .beton file (a local path).
        options: a ConvertOptions (max_side, quality, strict, shard_size, overwrite, ...).
        drop: fields not converted.
    """

    kind = "ffcv"
    unit = "run of samples"

    def __init__(self, src, options, drop=()):
        self.src = str(Path(src).resolve())
        if not Path(self.src).is_file():
            raise FormatError(f"{src}: no such file; `chute convert ffcv` takes the .beton "
                              "file FFCV's DatasetWriter wrote")
        layout = _read_layout(self.src)
        names, self.record, self.columns = _columns(self.src, layout["descriptors"],
                                                    frozenset(drop))
        if not names:
            raise _corrupt(self.src, "it declares no fields")
        unknown = sorted(set(drop) - set(names))
        if unknown:
            raise FormatError(f"{self.src}: --drop {unknown[0]}: no such field (it has "
                              f"{names})")
        if not self.columns:
            raise FormatError(f"{self.src}: every field is dropped")
        self.names = names
        header = layout["header"]
        self.num_samples = int(header["num_samples"])
        self.metadata_at = layout["metadata_at"]
        self.table_at = int(header["alloc_table_ptr"])
        self._check(layout["size"])
        self.units = [(start, min(start + _SAMPLES_PER_UNIT, self.num_samples))
                      for start in range(0, self.num_samples, _SAMPLES_PER_UNIT)]
        self.setup_fields(options)
        self.info["fields"] = self.info.pop("columns")

    # -- reading -------------------------------------------------------------------------

    def _metadata(self, fd: int, start: int, stop: int) -> np.ndarray:
        at = self.metadata_at + start * self.record.itemsize
        return np.frombuffer(_read(self.src, fd, at, (stop - start) * self.record.itemsize),
                             self.record)

    def _allocations(self, fd: int, size: int) -> np.ndarray:
        return np.frombuffer(_read(self.src, fd, self.table_at, size - self.table_at),
                             _ALLOCATION)

    def _check(self, size: int) -> None:
        """Every offset and size the file states lies inside it and agrees with the
        allocation table, before anything is written."""
        path, n = self.src, self.num_samples
        metadata_end = self.metadata_at + n * self.record.itemsize
        if metadata_end > size:
            raise _corrupt(path, f"{n} samples need a metadata table up to byte "
                           f"{metadata_end}, but the file has {size} bytes")
        if not metadata_end <= self.table_at <= size:
            raise _corrupt(path, f"its allocation table offset {self.table_at} is outside the "
                           f"data region (bytes {metadata_end} to {size})")
        if (size - self.table_at) % _ALLOCATION.itemsize:
            raise _corrupt(path, f"its allocation table ({size - self.table_at} bytes) is not "
                           f"a whole number of {_ALLOCATION.itemsize}-byte entries")
        with open(path, "rb") as f:
            table = self._allocations(f.fileno(), size)
            records = self._metadata(f.fileno(), 0, n)
            ends = table["ptr"] + table["size"]
            bad = (table["ptr"] < metadata_end) | (ends > self.table_at) | (ends < table["ptr"])
            if bad.any():
                i = int(np.argmax(bad))
                raise _corrupt(path, f"allocation {i} (bytes {int(table['ptr'][i])} + "
                               f"{int(table['size'][i])}) lies outside the data region "
                               f"(bytes {metadata_end} to {self.table_at})")
            if (table["sample_id"] >= n).any():
                raise _corrupt(path, f"its allocation table names sample "
                               f"{int(table['sample_id'].max())}, but it holds {n} samples")
            order = np.argsort(table["ptr"], kind="stable")
            ptrs, sizes, owners = (table[k][order] for k in ("ptr", "size", "sample_id"))
            for i, (name, record_type) in enumerate(zip(self.names, self._members(),
                                                        strict=True)):
                column = next((c for c in self.columns if c.name == name), None)
                if column is None or column.kind == SCALAR:
                    continue
                member = records[f"f{i}"]
                self._check_payloads(column, record_type, member, ptrs, sizes, owners)

    def _members(self) -> list[Any]:
        return [self.record.fields[f"f{i}"][0] for i in range(len(self.names))]

    def _check_payloads(self, column: Column, record_type, member, ptrs, sizes,
                        owners) -> None:
        path, name = self.src, column.name
        pointer = member["data_ptr"] if column.kind == IMAGE else (
            member["ptr"] if record_type.names else member)
        at = np.searchsorted(ptrs, pointer)
        found = (at < len(ptrs)) & (ptrs[np.minimum(at, len(ptrs) - 1)] == pointer)
        if not found.all():
            i = int(np.argmax(~found))
            raise _corrupt(path, f"field {name!r} of sample {i} points to byte "
                           f"{int(pointer[i])}, where no payload was allocated")
        at = np.minimum(at, len(ptrs) - 1)
        samples = np.arange(len(pointer))
        if (owners[at] != samples).any():
            i = int(np.argmax(owners[at] != samples))
            raise _corrupt(path, f"field {name!r} of sample {i} points to the payload of "
                           f"sample {int(owners[at][i])}")
        allocated = sizes[at]
        if column.kind == IMAGE:
            modes = member["mode"]
            if not np.isin(modes, (_JPEG, _RAW)).all():
                i = int(np.argmax(~np.isin(modes, (_JPEG, _RAW))))
                raise _corrupt(path, f"image {name!r} of sample {i} has mode {int(modes[i])} "
                               "(FFCV writes 0, JPEG, or 1, raw pixels)")
            pixels = member["height"].astype(np.uint64) * member["width"].astype(np.uint64) * 3
            expected = np.where(modes == _RAW, pixels, allocated)
            if (pixels == 0).any():
                i = int(np.argmax(pixels == 0))
                raise _corrupt(path, f"image {name!r} of sample {i} is {int(member['width'][i])}"
                               f"x{int(member['height'][i])} pixels")
        elif column.kind == NDARRAY:
            expected = np.full(len(pointer), np.dtype(column.dtype).itemsize
                               * int(np.prod(column.shape or ())), np.uint64)
        else:
            expected = member["size"]
        if (allocated != expected).any():
            i = int(np.argmax(allocated != expected))
            raise _corrupt(path, f"field {name!r} of sample {i} states {int(expected[i])} "
                           f"bytes, but {int(allocated[i])} were allocated")

    def samples(self, unit) -> Iterator[tuple[str, dict[str, Any]]]:
        start, stop = unit
        try:
            f = open(self.src, "rb")
        except OSError as exc:
            raise FormatError(f"{self.src}: cannot read the FFCV file "
                              f"({exc.strerror or exc})") from None
        with f:
            fd = f.fileno()
            stat = os.fstat(fd)
            ptrs, sizes = _payload_sizes(self.src, self.table_at, stat.st_size,
                                         stat.st_mtime_ns)

            def size_at(ptr: int) -> int:
                i = min(int(np.searchsorted(ptrs, ptr)), len(ptrs) - 1)
                if ptrs[i] != ptr:
                    raise _corrupt(self.src, f"no payload is allocated at byte {ptr} (the file "
                                   "changed since it was checked)")
                return int(sizes[i])

            metadata = self._metadata(fd, start, stop)
            fields = [(c, f"f{self.names.index(c.name)}") for c in self.columns]
            for row, record in enumerate(metadata):
                values: dict[str, Any] = {}
                for column, member in fields:
                    value = record[member]
                    if column.kind == SCALAR:
                        values[column.name] = value
                        continue
                    ptr = int(value["data_ptr"] if column.kind == IMAGE else
                              value["ptr"] if value.dtype.names else value)
                    # the sizes _check compared with the metadata, looked up again: a file
                    # rewritten since then fails here rather than giving a wrong sample
                    payload = _read(self.src, fd, ptr, size_at(ptr))
                    if column.kind != IMAGE:
                        values[column.name] = payload
                        continue
                    mode, height, width = (int(value[k]) for k in ("mode", "height", "width"))
                    if mode == _RAW and len(payload) != height * width * 3:
                        raise _corrupt(self.src, f"image {column.name!r} of sample "
                                       f"{start + row} changed since it was checked")
                    values[column.name] = (mode, height, width, payload)
                yield f"{Path(self.src).name}:{start + row}", values

    # -- writing -------------------------------------------------------------------------

    def _sample(self, raw: dict[str, Any], report) -> dict[str, Any]:
        sample: dict[str, Any] = {}
        for column in self.columns:
            if column.kind == IMAGE:
                mode, height, width, payload = raw[column.name]
                data, height, width = self._image(column.name, mode, height, width, payload,
                                                  report)
                sample[column.name] = data
                if column.dims:
                    sample["height"], sample["width"] = height, width
                continue
            try:
                sample[column.name] = column.decode(raw[column.name])
            except (ValueError, UnicodeDecodeError) as exc:
                raise _Skip(f"field {column.name!r} ({column.encoding}) does not decode "
                            f"({type(exc).__name__}: {str(exc)[:120]})") from None
        if not any(c.kind == IMAGE for c in self.columns):
            report.actions["stored"] += 1
        return sample

    def _image(self, name: str, mode: int, height: int, width: int, payload: bytes,
               report) -> tuple[bytes, int, int]:
        """(bytes stored, height, width): JPEG as it is (its header must state the size
        the metadata does), raw pixels as PNG; --max-side downscales either to JPEG."""
        from PIL import Image

        from chute.convert._images import UnreadableImage, prepare_image

        options = self.options
        if mode == _RAW:
            too_big = options.max_side is not None and max(height, width) > options.max_side
            pixels = np.frombuffer(payload, np.uint8).reshape(height, width, 3)
            png = _png(Image.fromarray(pixels, "RGB"))
            if not too_big:
                report.actions["png"] += 1
                return png, height, width
            payload = png
        try:
            image = prepare_image(bytes(payload), max_side=options.max_side,
                                  quality=options.quality)
        except UnreadableImage as exc:
            raise _Skip(f"image {name!r}: {exc}") from None
        if mode == _JPEG and image.action != "resized" and (image.height, image.width) != (
                height, width):
            raise _Skip(f"image {name!r}: the JPEG is {image.width}x{image.height}, the "
                        f"file's metadata says {width}x{height}")
        report.actions[image.action] += 1
        return image.data, image.height, image.width


def _png(image) -> bytes:
    import io

    out = io.BytesIO()
    image.save(out, "PNG", compress_level=6)
    return out.getvalue()


def convert_ffcv(src, dst, options=None, *, drop=(), engine=None):
    """An FFCV `.beton` file -> a chute dataset, sample i to sample i.

    Every field becomes a field of the same name (FFCV_MAPPING says which kind): an
    RGBImageField's JPEG samples are stored byte for byte and its raw-pixel samples encoded as
    PNG, losslessly (`options.max_side` downscales either and stores JPEG), with height/width
    columns for the first image field; IntField and FloatField become int64 and float64
    scalar columns, NDArrayField an ndarray field of its dtype and shape, BytesField a bytes
    field, JSONField a json field. Read by FFCV's file layout: `ffcv` is not needed. Every
    offset and size in the file is checked against it first: a truncated or corrupt file
    raises FormatError and writes nothing.

    Args:
        src: the .beton file (local).
        dst: the new dataset (folder or s3://...).
        options: a ConvertOptions (workers does not apply).
        drop: names of fields not to convert.
        engine: where to run it (None: this process; `chute.ray.RayEngine`: one task per
            group of 4096-sample runs).

    Returns:
        A ConvertReport (written, actions, skipped, report_path).

    Raises:
        FormatError: not a .beton file, a truncated or corrupt one, a custom field type.
    """
    from chute.convert._convert import ConvertOptions
    from chute.convert._jobs import run_job

    job = FFCVJob(src, options or ConvertOptions(), drop)
    return run_job(job, dst, engine=engine)
