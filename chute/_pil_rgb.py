"""8-bit pixels of high-bit-depth grey PIL images, the step the image converter
(chute/readers/convert/_images.py) and the CPU decoder's PIL path (chute/fallbacks/_slow_path.py)
share before their RGB conversion."""

from __future__ import annotations

import numpy as np

# Integer grey modes wider than 8 bits: Pillow opens 16-bit PNGs and TIFFs (depth maps, scans,
# medical images) as "I;16*" or "I". Its convert("RGB") clips them at 255, which turns almost
# every such image white.
_WIDE_GREY = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


def eight_bit(img):
    """`img` with a 16-bit grey mode ("I;16*", and "I" read as 16-bit) scaled to 8-bit grey
    ("L", value >> 8, negatives as 0); any other image unchanged.

    Args:
        img: a loaded PIL image.
    """
    if img.mode not in _WIDE_GREY:
        return img
    from PIL import Image

    values = np.clip(np.asarray(img).astype(np.int64), 0, 65535) >> 8
    return Image.fromarray(values.astype(np.uint8), "L")
