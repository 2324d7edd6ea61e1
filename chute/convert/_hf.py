"""Hugging Face `datasets` tables as chute samples, shared by `chute convert hf` and
`write_dataset(hf_dataset)`: an `Image` column read undecoded (the files' bytes, so JPEGs are
stored as they are instead of decoded and re-encoded) and a `ClassLabel` column's names kept as
the dataset's class names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chute.convert._jobs import ConvertJob
from chute.convert._transcode import TRANSCODE_QUALITY
from chute.errors import FormatError

__all__ = ["hf_samples", "is_hf_dataset", "undecoded_images", "hf_class_names",
           "check_label_column", "hf_rows", "HFJob"]


def is_hf_dataset(obj: Any) -> bool:
    """True for a `datasets.Dataset` (without importing `datasets`)."""
    return type(obj).__module__.split(".")[0] == "datasets" and hasattr(obj, "features") \
        and hasattr(obj, "cast_column")


def undecoded_images(table, image_column: str):
    """(table, encoded): `table` with its `Image` column `image_column` cast to undecoded
    values ({"bytes", "path"}), and whether it was one (False: the column is left alone)."""
    import datasets

    if not isinstance(table.features.get(image_column), datasets.Image):
        return table, False
    return table.cast_column(image_column, datasets.Image(decode=False)), True


def hf_class_names(table, label_column: str) -> list[str] | None:
    """The names of a `ClassLabel` column (None: not one, or no such column)."""
    feature = table.features.get(label_column)
    return list(getattr(feature, "names", None) or []) or None


def check_label_column(table, label_column: str, src) -> None:
    """FormatError unless `label_column` (when the table has it) holds integers: a ClassLabel
    or an integer/bool Value."""
    feature = table.features.get(label_column)
    if feature is None or hf_class_names(table, label_column) is not None:
        return
    dtype = getattr(feature, "dtype", None)
    if dtype == "bool" or (isinstance(dtype, str) and dtype.lstrip("u").startswith("int")):
        return
    raise FormatError(f"{src}: label column {label_column!r} holds {dtype or feature}, not "
                      "integers or a ClassLabel; pass --label-column naming an integer column "
                      "(or --label-column '' to store no label)")


def hf_rows(table, image_column: str, encoded: bool, src,
            ids=None) -> Iterator[dict[str, Any]]:
    """The rows of `table` as dicts, the undecoded image column (`encoded`) as its bytes;
    `ids` are their row numbers in errors (default 0, 1, ...)."""
    for i, row in zip(range(len(table)) if ids is None else ids, table, strict=True):
        if encoded:
            row[image_column] = _image_bytes(row[image_column], src, i)
        yield row


def _checked(table, src, image_column: str, label_column: str):
    """(table with its image column undecoded, whether it was an Image column, class names),
    after refusing a table without `image_column` or a `label_column` without integers."""
    if image_column not in table.column_names:
        raise FormatError(f"{src}: no column {image_column!r} (it has {table.column_names}); "
                          "pass --image-column")
    check_label_column(table, label_column, src)
    class_names = hf_class_names(table, label_column)
    table, encoded = undecoded_images(table, image_column)
    return table, encoded, class_names


def _sample(row: dict, i: int, image_column: str, label_column: str) -> dict:
    """Row `i` as the sample `chute convert hf` stores (image, label, meta)."""
    sample = {"image": row.pop(image_column)}
    if label_column in row:
        sample["label"] = int(row.pop(label_column))
    sample["meta"] = {"key": str(i), **{k: v for k, v in row.items()
                                        if isinstance(v, (str, int, float, bool))}}
    return sample


def _image_bytes(value: dict | None, src, row: int) -> bytes:
    """The encoded image of an undecoded `datasets.Image` value ({"bytes", "path"})."""
    if value and value.get("bytes") is not None:
        return value["bytes"]
    if value and value.get("path"):
        return Path(value["path"]).read_bytes()
    raise FormatError(f"{src}: row {row} has an empty image (no bytes and no path); fix or "
                      "drop the row")


def hf_samples(table, src, *, image_column: str = "image",
               label_column: str = "label") -> tuple[Iterator[dict], list[str] | None]:
    """The samples `chute convert hf` writes from a `datasets.Dataset`, and its class names.

    Each sample is {"image": the encoded image (an `Image` column's file bytes, undecoded),
    "label": int (when the table has `label_column`), "meta": {"key": row number, and every
    other column holding a str, int, float or bool}}.

    Args:
        table: a `datasets.Dataset`.
        src: what the table was loaded from, named in errors.
        image_column: the column holding images.
        label_column: the column holding integer labels (a ClassLabel's names become the
            class names).

    Raises:
        FormatError: no `image_column`, or a `label_column` that holds no integers.
    """
    table, encoded, class_names = _checked(table, src, image_column, label_column)
    rows = hf_rows(table, image_column, encoded, src)
    return (_sample(row, i, image_column, label_column) for i, row in enumerate(rows)), \
        class_names


class HFJob(ConvertJob):
    """The rows of a `datasets.Dataset` as units, written as `chute convert hf` writes them
    (fields inferred from the first row, as `write_dataset` infers them).

    Args:
        table: the `datasets.Dataset`.
        src: what it was loaded from, named in errors.
        image_column: the column holding images.
        label_column: the column holding integer labels.
        shard_size: payload bytes per shard.
        overwrite: replace a dataset at the destination.
        quality: JPEG quality for images that are not JPEG already.
        progress: show a progress bar.
    """

    kind = "hf"
    unit = "row"

    def __init__(self, table, src, *, image_column: str = "image", label_column: str = "label",
                 shard_size: str | int = "1GiB", overwrite: bool = False,
                 quality: int = TRANSCODE_QUALITY, progress: bool = True):
        from chute.readers.kinds import infer_declaration

        self.table, self.encoded, self.class_names = _checked(table, src, image_column,
                                                              label_column)
        self.src, self.image_column, self.label_column = str(src), image_column, label_column
        self.quality = quality
        self.shard_size, self.overwrite, self.progress = shard_size, overwrite, progress
        self.units = range(len(self.table))
        self.info = {"name": self.src}
        if not len(self.table):
            raise FormatError(f"{src}: the dataset has no rows")
        first = next(self._samples(range(1)))
        self.fields = {**{name: infer_declaration(value) for name, value in first.items()},
                       "image": {"kind": "bytes", "media": "image"},
                       "height": "int32", "width": "int32"}  # as write_dataset declares them

    def _samples(self, units) -> Iterator[dict]:
        from chute.convert._write_dataset import with_jpeg

        rows = self.table.select(units) if len(units) != len(self.table) else self.table
        for i, row in zip(units, hf_rows(rows, self.image_column, self.encoded, self.src,
                                         ids=units), strict=True):
            yield with_jpeg(_sample(row, i, self.image_column, self.label_column), "image", i,
                            self.quality)

    def write(self, units, writer, report, progress, workers) -> None:
        for sample in self._samples(units):
            writer.write(sample)
            report.actions["stored"] += 1
            progress(1)

    def source_info(self, report) -> dict:
        return {"kind": "hf", **self.info}
