"""The slower correct path through PIL: non-JPEG payloads and JPEGs libjpeg warned about.

PIL is the reference here: a JPEG it rejects as truncated or corrupt fails, one it decodes
(e.g. with harmless extraneous bytes) is resampled with exactly the fast path's arithmetic.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from numba import njit

from chute.fallbacks._resample import resample_into
from chute.fallbacks._status import BOX_OUTSIDE, CORRUPT, OK, UNREADABLE

__all__ = ["decode_with_pil", "resample_decoded"]


def decode_with_pil(payload: np.ndarray) -> tuple[int, np.ndarray | None]:
    """(status, RGB uint8 [H, W, 3] or None) for one encoded payload."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. EXIF/ICC chatter; failures still raise
            with Image.open(io.BytesIO(payload.tobytes())) as image:
                image.load()
                rgb = image.convert("RGB")
    except UnidentifiedImageError:
        return UNREADABLE, None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return CORRUPT, None
    return OK, np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


@njit(nogil=True, cache=True)
def _resample_pixels(pixels, box, flip, out, b, kind, nchw, mean255, std255):
    height, width = pixels.shape[0], pixels.shape[1]
    top, left, box_h, box_w = box[0], box[1], box[2], box[3]
    if top < 0 or left < 0 or box_h < 1 or box_w < 1 or top + box_h > height or \
            left + box_w > width:
        out[b] = 0
        return BOX_OUTSIDE
    row = np.empty(width * 3, dtype=np.float32)
    resample_into(pixels.reshape(-1), height, width, np.float64(top), np.float64(left),
                  np.float64(box_h), np.float64(box_w), flip, out, b, kind, nchw, mean255,
                  std255, row)
    return OK


def resample_decoded(pixels, box, flip, out, b, kind, nchw, mean255, std255) -> int:
    """Resample decoded RGB pixels [H, W, 3] into out[b]; the status (BOX_OUTSIDE if no fit)."""
    return int(_resample_pixels(pixels, box, bool(flip), out, b, kind, nchw, mean255, std255))
