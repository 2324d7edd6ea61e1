"""Synthetic JPEG images with natural-image-like statistics, for the demo and for tests.

Smooth random colour fields (upsampled low-resolution noise) plus fine grain, saved as
baseline JPEGs at assorted sizes, so decode and resize costs resemble those of photos.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

__all__ = ["synthetic_jpeg", "write_image_folder"]


def synthetic_jpeg(rng: np.random.Generator, height: int, width: int, quality: int = 90) -> bytes:
    from PIL import Image

    coarse_shape = (max(2, height // 32), max(2, width // 32), 3)
    coarse = rng.integers(0, 256, size=coarse_shape, dtype=np.uint8)
    img = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    pixels = np.asarray(img, dtype=np.int16)
    grain = rng.integers(-12, 13, size=pixels.shape, dtype=np.int16)
    pixels = np.clip(pixels + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def write_image_folder(
    root: str | Path,
    n_images: int,
    n_classes: int = 10,
    size_range: tuple[int, int] = (240, 560),
    seed: int = 0,
) -> Path:
    """Write `n_images` JPEGs into `root/class_XX/NNNNN.jpg` (an ImageFolder layout)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for i in range(n_images):
        h, w = (int(v) for v in rng.integers(size_range[0], size_range[1] + 1, size=2))
        folder = root / f"class_{i % n_classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:05d}.jpg").write_bytes(synthetic_jpeg(rng, h, w))
    return root
