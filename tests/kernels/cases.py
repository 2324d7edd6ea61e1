"""Generated test batches for the resize kernel: variable-size sources, boxes and flips."""

from __future__ import annotations

import numpy as np

from tests._media import smooth_image

# (source height, source width, box (y0, x0, h, w) or None for the full image, pad columns)
SOURCES = [
    (1, 1, None, 0),  # 1x1 source: every output pixel is that pixel
    (37, 53, None, 0),  # odd sizes, full image
    (300, 260, (3.5, 2.25, 290.5, 250.0), 0),  # > 8x downscale at small outputs
    (9, 13, (1.25, 2.5, 5.5, 7.75), 0),  # upscale with a fractional box
    (64, 80, (10.3, 7.7, 40.6, 55.1), 5),  # fractional box, row pitch wider than the row
    (21, 18, (0.0, 11.0, 21.0, 7.0), 2),  # box touching the right and bottom edges
    (50, 41, (49.6, 0.3, 0.4, 40.7), 0),  # thin fractional box ending at the bottom/right edges
    (15, 17, (3.2, 4.9, 0.05, 0.7), 1),  # sub-pixel box
    (257, 341, (16.0625, 0.0, 224.875, 340.999), 0),  # torchvision eval: Resize + CenterCrop
]

# Output sizes: 1x1, odd, a typical small one, and one larger than some sources.
OUTPUT_SIZES = [(1, 1), (7, 5), (24, 32), (33, 31)]


def make_batch(seed: int = 0):
    """-> (images, padded, boxes [B,4] float32, flips [B] bool).

    `padded` are the arrays actually handed to the kernel: views of wider arrays where a
    case asks for a row pitch larger than width * 3.
    """
    images, padded, boxes = [], [], []
    for k, (h, w, box, pad) in enumerate(SOURCES):
        store = smooth_image(h, w + pad, seed=seed * len(SOURCES) + k)
        image = store[:, :w]
        images.append(np.ascontiguousarray(image))
        padded.append(image)
        boxes.append((0.0, 0.0, float(h), float(w)) if box is None else box)
    flips = np.arange(len(SOURCES)) % 2 == 1
    return images, padded, np.asarray(boxes, dtype=np.float32), flips


def view_boxes(images, views: int, seed: int):
    """[B, V, 4] boxes inside each image and [B, V] flips, every view its own."""
    rng = np.random.default_rng(seed)
    boxes = np.empty((len(images), views, 4), dtype=np.float32)
    for b, image in enumerate(images):
        h, w = image.shape[:2]
        for v in range(views):
            bh, bw = rng.uniform(0.05, 1.0) * h, rng.uniform(0.05, 1.0) * w
            boxes[b, v] = (rng.uniform(0, h - bh), rng.uniform(0, w - bw), bh, bw)
    return boxes, rng.random((len(images), views)) < 0.5
