"""What the converters of other loaders' formats share (`chute convert mds`, `chute convert
litdata`): reading their files from a folder or object storage, the chute field each of their
columns becomes, and the ConvertJob that writes their samples shard by shard (a unit is one of
their shards, so `--engine ray` splits a convert by shard)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from chute.convert._jobs import ConvertJob
from chute.errors import ChuteError, FormatError

__all__ = ["Column", "PeerJob", "read_source_file", "source_name", "unmappable",
           "RawImage"]

# the kinds a peer column becomes (Column.kind)
IMAGE, BYTES, JSON, SCALAR, NDARRAY = "image", "bytes", "json", "scalar", "ndarray"


def source_name(src) -> str:
    """`src` as stored in job units: a URL as it is, a local folder resolved."""
    from chute.readers.storage import is_remote

    return str(src).rstrip("/") if is_remote(src) else str(Path(src).resolve())


def read_source_file(src: str, name: str, what: str) -> bytes:
    """The bytes of `name` (a path relative to `src` as an index names it) in the folder or
    object storage prefix `src`; FormatError naming the file when it cannot be read. A name
    that leaves `src` (absolute, or with `..`) is refused."""
    from chute.readers.storage import Remote, StorageError, is_remote, read_regular_file

    parts = PurePosixPath(name).parts
    if not name or name.startswith(("/", "\\")) or ".." in parts or "\\" in name:
        raise FormatError(f"{src}: {what} names the file {name!r}, which is outside the "
                          "dataset folder; the index is corrupt")
    try:
        if is_remote(src):
            return Remote(src).get_bytes(name)
        return read_regular_file(Path(src) / name)
    except (OSError, StorageError) as exc:
        raise FormatError(f"{src}: cannot read {name} ({what}): "
                          f"{getattr(exc, 'strerror', None) or exc}") from None


def unmappable(src, column: str, what: str, fix: str) -> FormatError:
    """The one-line error for a column chute cannot store."""
    return FormatError(f"{src}: column {column!r} is {what}, which no chute field kind holds; "
                       f"{fix}")


@dataclass(frozen=True)
class RawImage:
    """Pixels stored raw by a peer (MDS's and litdata's `pil` encoding)."""

    mode: str
    width: int
    height: int
    data: bytes

    def pil(self):
        from PIL import Image

        return Image.frombytes(self.mode, (self.width, self.height), self.data)


def parse_raw_image(data: bytes) -> RawImage:
    """MDS's and litdata's `pil` layout: uint32 width, height, mode length; mode; raw pixels."""
    if len(data) < 12:
        raise ValueError("a raw image record is shorter than its 12-byte header")
    width, height, mode_size = (int(v) for v in np.frombuffer(data[:12], "<u4"))
    mode = bytes(data[12:12 + mode_size]).decode("utf-8")
    return RawImage(mode, width, height, bytes(data[12 + mode_size:]))


@dataclass
class Column:
    """One column of a peer's samples and the chute field it becomes.

    Attributes:
        name: the field name (the peer's column name; nested litdata keys joined with ".").
        kind: IMAGE (encoded image bytes or a RawImage; stored as JPEG), BYTES, JSON (any
            JSON value, str included), SCALAR (a number of `dtype`) or NDARRAY.
        dtype: the scalar's or array's dtype (None: taken from the first sample).
        shape: a fixed array shape (None: ragged, the leading dimension varies).
        encoding: the peer's name for the column's encoding, in messages and the manifest.
        decode: raw bytes of one value -> the value.
    """

    name: str
    kind: str
    encoding: str
    decode: Callable[[bytes], Any]
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    dims: bool = field(default=False)  # the image column whose height/width are stored

    def declaration(self, first: Any) -> Any:
        if self.kind == IMAGE:
            return {"kind": "bytes", "media": "image"}
        if self.kind in (BYTES, JSON):
            return self.kind
        if self.kind == SCALAR:
            return self.dtype or np.asarray(first).dtype.name
        array = np.asarray(first)
        dtype = self.dtype or array.dtype.name
        if self.shape is not None:
            return {"kind": "ndarray", "dtype": dtype, "shape": list(self.shape)}
        return {"kind": "ndarray", "dtype": dtype, "ragged": True,
                "shape": [0 if array.ndim == 0 else array.shape[0], *array.shape[1:]]}


class _Skip(Exception):
    """A sample that cannot be stored (the message says why)."""


class PeerJob(ConvertJob):
    """The samples of a peer format's shards, in the order of its index.

    Subclasses set `kind`, `unit`, `src`, `columns` and `units` and implement `samples(unit)`,
    which yields (key, {column: raw bytes}) for every sample of one shard, in order.

    Args:
        options: a ConvertOptions (quality, max_side, strict, shard_size, overwrite, ...).
    """

    src: str
    columns: list[Column]

    def samples(self, unit: Any) -> Iterator[tuple[str, dict[str, bytes]]]:
        raise NotImplementedError

    def setup_fields(self, options) -> None:
        """Declare the fields from the columns and the first sample (run by the subclass's
        __init__ once `columns` and `units` are set)."""
        self.options = options
        self.take_options(options)
        images = [c for c in self.columns if c.kind == IMAGE]
        names = {c.name for c in self.columns}
        if images and not {"height", "width"} & names:
            images[0].dims = True
        first = self._first_values()
        self.fields: dict[str, Any] = {}
        for column in self.columns:
            self.fields[column.name] = column.declaration(first.get(column.name))
            if column.dims:
                self.fields.update(height="int32", width="int32")
        self.info = {"path": self.src,
                     "columns": {c.name: c.encoding for c in self.columns}}

    def _first_values(self) -> dict[str, Any]:
        for unit in self.units:
            for key, raw in self.samples(unit):
                first = {}
                for column in self.columns:
                    if column.kind not in (SCALAR, NDARRAY):
                        continue
                    try:
                        first[column.name] = column.decode(raw[column.name])
                    except Exception as exc:  # noqa: BLE001  (named in one line)
                        raise FormatError(
                            f"{self.src}: sample {key}: column {column.name!r} "
                            f"({column.encoding}) does not decode ({type(exc).__name__}: "
                            f"{str(exc)[:120]}); drop it with --drop {column.name}") from None
                return first
        raise FormatError(f"{self.src}: the dataset has no samples")

    def _sample(self, raw: dict[str, bytes], report) -> dict[str, Any]:
        from chute.convert._images import UnreadableImage, encode_jpeg, prepare_image

        sample: dict[str, Any] = {}
        for column in self.columns:
            try:
                value = column.decode(raw[column.name])
            except FormatError:
                raise  # the column cannot be read at all (named in one line)
            except Exception as exc:  # noqa: BLE001  (a corrupt record, named below)
                raise _Skip(f"column {column.name!r} ({column.encoding}) does not decode "
                            f"({type(exc).__name__}: {str(exc)[:120]})") from None
            if column.kind == IMAGE:
                try:
                    raw_pixels = isinstance(value, RawImage)
                    if raw_pixels:
                        value = encode_jpeg(value.pil(), self.options.quality)
                    image = prepare_image(bytes(value), max_side=self.options.max_side,
                                          quality=self.options.quality)
                except (UnreadableImage, ValueError, OSError) as exc:
                    raise _Skip(f"column {column.name!r}: {exc}") from None
                # raw pixels were encoded here: "transcoded" unless also downscaled
                report.actions["transcoded" if raw_pixels and image.action == "stored"
                               else image.action] += 1
                value = image.data
                if column.dims:
                    sample["height"], sample["width"] = image.height, image.width
            sample[column.name] = value
        return sample

    def write(self, units: Sequence[Any], writer, report, progress, workers) -> None:
        for unit in units:
            for key, raw in self.samples(unit):
                try:
                    sample = self._sample(raw, report)
                except _Skip as exc:
                    if self.options.strict:
                        raise ChuteError(f"{self.src}: sample {key}: {exc}; convert without "
                                         "--strict to skip it") from None
                    report.skipped.append((key, str(exc)))
                    continue
                try:
                    writer.write(sample)
                except (ValueError, TypeError) as exc:
                    raise FormatError(f"{self.src}: sample {key}: {exc} (--drop COLUMN "
                                      "leaves a column out)") from None
                if not any(c.kind == IMAGE for c in self.columns):
                    report.actions["stored"] += 1
            progress(1)

    def check(self, report) -> None:
        if report.written == 0:
            first = report.skipped[0] if report.skipped else ("", "no samples")
            raise FormatError(f"{self.src}: no sample was stored ({len(report.skipped)} "
                              f"skipped; first: {first[0]}: {first[1]})")


def json_value(data: bytes) -> Any:
    import json

    return json.loads(bytes(data).decode("utf-8"))


def text_value(data: bytes) -> str:
    return bytes(data).decode("utf-8")


def image_bytes(data: bytes) -> bytes:
    return bytes(data)


def pil_of(value) -> Any:
    """A RawImage or encoded image bytes as a PIL image (tests compare pixels with it)."""
    from PIL import Image

    return value.pil() if isinstance(value, RawImage) else Image.open(io.BytesIO(value))
