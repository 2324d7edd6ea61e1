"""8-bit pixels of high-bit-depth grey PIL images, the step the image converter
(chute/convert/_images.py) and the CPU decoder's PIL path (chute/fallbacks/_slow_path.py)
share before their RGB conversion."""

from __future__ import annotations

import numpy as np

# 16-bit grey modes: Pillow opens 16-bit PNGs and TIFFs (depth maps, scans, medical images) as
# "I;16*", and older Pillow releases a 16-bit PNG as "I". Its convert("RGB") clips them at 255,
# which turns almost every such image white. "I" from any other format is 32-bit of unknown
# range (8-bit values too): converted as torchvision's loader does.
_WIDE_GREY = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


def eight_bit(img):
    """`img` with a 16-bit grey mode ("I;16*", and "I" of a PNG, 16-bit by PNG's depths)
    scaled to 8-bit grey ("L", value >> 8, negatives as 0); any other image unchanged.

    Args:
        img: a loaded PIL image.
    """
    if img.mode not in _WIDE_GREY and not (img.mode == "I" and img.format == "PNG"):
        return img
    from PIL import Image

    values = np.clip(np.asarray(img).astype(np.int64), 0, 65535) >> 8
    return Image.fromarray(values.astype(np.uint8), "L")
