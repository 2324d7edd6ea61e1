"""The datasets benchmarks measure: JPEG files written to a chute dataset as they are; and the
DINO multi-crop views the views benchmarks make of them.

The benchmark scripts import this module from their own folder (run them as
`python benchmarks/bench_*.py`, which puts that folder on sys.path).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from chute import View
from chute.convert import ShardWriter

__all__ = ["DINO_VIEWS", "jpeg_files", "write_jpeg_dataset", "machine_line"]

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32"}

# DINO's multi-crop (docs/views.md): 2 global views at 224 + 6 local ones at 96 per image
DINO_VIEWS = [View(224, scale=(0.32, 1.0), count=2), View(96, scale=(0.05, 0.32), count=6)]


def jpeg_files(folder: Path) -> list[Path]:
    """The *.jpg / *.jpeg files under `folder` (any depth, any case), sorted.

    Args:
        folder: where to look.

    Raises:
        SystemExit: when there are none (a benchmark has nothing to measure).
    """
    files = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        raise SystemExit(f"{folder}: no JPEG files (*.jpg, *.jpeg) found")
    return files


def write_jpeg_dataset(files: list[Path], dest: Path, *, rgb_only: bool = False) -> Path:
    """A dataset at `dest` holding each file's bytes unchanged, label = its index, and its size.

    Args:
        files: JPEG files, in sample order.
        dest: the dataset folder to write.
        rgb_only: skip greyscale and CMYK JPEGs (for contenders that decode RGB only).

    Returns:
        `dest`.
    """
    with ShardWriter(dest, FIELDS) as writer:
        for i, file in enumerate(files):
            with Image.open(file) as img:
                if rgb_only and img.mode != "RGB":
                    continue
                width, height = img.size
            writer.write({"image": file.read_bytes(), "label": i, "height": height,
                          "width": width})
    return dest


def machine_line() -> str:
    """What every benchmark table states about the CPU side: the cores this process may use
    (physical and logical) and whether chute's ROI JPEG decoder was built here (without it the
    cpu backend decodes whole frames)."""
    import os

    from chute.fallbacks import roi_decoder_status
    from chute.pipelines import physical_cores

    cpus = sorted(os.sched_getaffinity(0))
    roi = roi_decoder_status()
    return (f"{physical_cores(cpus)} physical cores ({len(cpus)} logical); cpu ROI decoder "
            + ("built" if roi.available else f"unavailable: {roi.reason}"))

