"""Small generated datasets and references shared by the DALI backend tests."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from tests.pipelines._pipeline_data import write_dataset


def write_jpeg_dataset(path: Path, n: int = 20, sizes=(40, 120), seed: int = 0,
                       corrupt: tuple[int, ...] = (), damage: str = "truncate") -> Path:
    """n synthetic JPEGs of random sizes in `sizes` (labels i % 3, no metadata); samples in
    `corrupt` are damaged (`write_dataset`'s `damage`)."""
    return write_dataset(path, n, sizes, seed, corrupt, shard_size="64KiB", meta=False,
                         label=lambda i: i % 3, damage=damage)


def pil_reference(dataset, ids, boxes, flips, size) -> np.ndarray:
    """uint8 NHWC batch by the shared resize definition: PIL BILINEAR with a box, then flip."""
    from PIL import Image

    height, width = size
    images = []
    for i, (top, left, h, w), flip in zip(ids, boxes, flips, strict=True):
        img = Image.open(io.BytesIO(dataset[int(i)]["image"].tobytes())).convert("RGB")
        resized = np.asarray(
            img.resize((width, height), Image.BILINEAR, box=(left, top, left + w, top + h))
        )
        images.append(resized[:, ::-1] if flip else resized)
    return np.stack(images)


def to_255_nhwc(batch: np.ndarray, dtype: str, layout: str, mean, std) -> np.ndarray:
    """Any backend output as float64 NHWC pixel values in 0..255 units (undoing normalisation)."""
    values = np.asarray(batch, dtype=np.float64)
    if layout == "NCHW":
        values = values.transpose(0, 2, 3, 1)
    if dtype != "uint8":
        values = values * (255.0 * np.asarray(std)) + 255.0 * np.asarray(mean)
    return values
