"""What to convert: image folders with class sub-folders, and CSV files of paths."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

from chute.errors import FormatError

__all__ = ["Source", "IMAGE_EXTENSIONS", "list_imagefolder", "list_csv"]

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".jfif"}
)


@dataclass(frozen=True)
class Source:
    path: Path  # file to read
    key: str  # stable name stored as meta["key"] (used by `chute meta update`)
    label: int | None = None
    meta: dict = field(default_factory=dict)  # extra metadata (CSV columns)


def _image_files(folder: Path) -> list[Path]:
    """Every entry named like an image, also inside symlinked sub-folders (as torchvision's
    ImageFolder finds them; a link back to a folder being walked is not entered twice).
    Entries that are not regular files (broken symlinks, FIFOs, a folder named x.jpg) are kept,
    so the convert lists them as skipped."""
    found = []
    walking = set()

    def walk(top: str) -> None:
        real = os.path.realpath(top)
        if real in walking:  # a symlink cycle
            return
        walking.add(real)
        try:
            entries = sorted(os.scandir(top), key=lambda e: e.name)
        except OSError:
            entries = []  # unreadable folder: nothing to list
        for entry in entries:
            if os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                found.append(Path(entry.path))
            if entry.is_dir():
                walk(entry.path)
        walking.discard(real)

    walk(str(folder))
    return sorted(found)


def list_imagefolder(root) -> tuple[list[Source], list[str]]:
    """Every image under ROOT/<class>/..., labels = index of the class folder in sorted order;
    a ROOT without sub-folders gives unlabelled images (class names []). Keys are paths
    relative to ROOT ("n01440764/img_001.JPEG")."""
    root = Path(root)
    if not root.is_dir():
        raise FormatError(f"{root}: not a folder; `convert imagefolder` needs ROOT/<class>/<image>")
    class_names = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not class_names:
        return _flat_folder(root), []
    sources = [Source(path, path.relative_to(root).as_posix(), label)
               for label, name in enumerate(class_names)
               for path in _image_files(root / name)]
    if not sources:
        raise FormatError(f"{root}: no image files found in its class folders "
                          f"(extensions: {', '.join(sorted(IMAGE_EXTENSIONS))})")
    return sources, class_names


def _flat_folder(root: Path) -> list[Source]:
    """A folder of images without class sub-folders: no labels."""
    sources = [Source(path, path.relative_to(root).as_posix()) for path in _image_files(root)]
    if not sources:
        raise FormatError(f"{root}: no image files found (extensions: "
                          f"{', '.join(sorted(IMAGE_EXTENSIONS))}); put them in ROOT/ or "
                          "ROOT/<class>/")
    return sources


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _labels(values: list[str], csv_path: Path) -> tuple[list[int], list[str] | None]:
    """Integer labels as they are; names become indices into the sorted names of every row
    (skipped rows included, so indices do not depend on which files are readable). A mix of
    integers and names is refused: "3" would otherwise be a class name beside "cat"."""
    integers = [_integer(v) for v in values]
    if all(i is not None for i in integers):
        return [int(i) for i in integers if i is not None], None
    if any(v == "" for v in values):
        raise FormatError(f"{csv_path}: some rows have an empty label; fill them or drop the "
                          "label column")
    number = next((k for k, i in enumerate(integers) if i is not None), None)
    if number is not None:
        name = next(k for k, i in enumerate(integers) if i is None)
        raise FormatError(
            f"{csv_path}: the label column mixes integers and names (data row {number + 1}: "
            f"{values[number]!r}, row {name + 1}: {values[name]!r}); use integers for every "
            "row or names for every row (e.g. 'class_3' instead of '3')")
    names = sorted(set(values))
    index = {name: i for i, name in enumerate(names)}
    return [index[v] for v in values], names


def read_csv_rows(csv_path: Path) -> tuple[list[dict], list[str]]:
    """The rows and column names of a CSV that must have a `path` column; FormatError naming
    the file otherwise."""
    try:
        # utf-8-sig: spreadsheet exports start with a byte order mark
        with open(csv_path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            rows, no_path = [], None
            for row in reader:
                rows.append(row)
                if no_path is None and row.get("path") is None:
                    no_path = reader.line_num
    except FileNotFoundError:
        raise FormatError(f"{csv_path}: no such CSV file") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"{csv_path}: cannot read it as UTF-8 CSV ({exc})") from None
    if "path" not in columns:
        raise FormatError(f"{csv_path}: needs a `path` column (has {columns})")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:  # csv.DictReader keeps the last one without a word
        raise FormatError(f"{csv_path}: its header names columns {repeated} more than once; "
                          "name each column once")
    if no_path is not None:
        raise FormatError(f"{csv_path}, line {no_path}: the row has no `path` cell (fewer "
                          "cells than the header); fill it in or remove the row")
    return rows, columns


def list_csv(csv_path, root=None) -> tuple[list[Source], list[str] | None]:
    """Rows of a CSV with a `path` column (relative to `root`, default the CSV's folder), an
    optional `label` column, and any other columns (e.g. `text`) kept as metadata.
    Keys are the `path` values as written."""
    csv_path = Path(csv_path)
    root = Path(root) if root is not None else csv_path.parent
    rows, columns = read_csv_rows(csv_path)
    has_label = "label" in columns
    labels, class_names = _labels([r["label"] for r in rows], csv_path) if has_label else \
        ([None] * len(rows), None)
    sources = []
    for row, label in zip(rows, labels, strict=True):
        extra = {k: v for k, v in row.items() if k not in ("path", "label") and k is not None}
        sources.append(Source(root / row["path"], row["path"], label, extra))
    return sources, class_names
