"""The slower correct path: non-JPEG payloads through PIL, and JPEGs libjpeg warned about.

A libjpeg warning means corrupt data (truncation, broken entropy-coded segments, ...): such a
JPEG fails, with one exception that leaves every pixel intact and is common in real datasets:
stray bytes between the last scan and the end-of-image marker. Pixels that pass are resampled
with exactly the fast path's arithmetic.
"""

from __future__ import annotations

import ctypes
import io
import warnings

import numpy as np
from numba import njit

from chute._pil_rgb import eight_bit
from chute._resize_box import BOX_SLACK
from chute.fallbacks import _turbojpeg
from chute.fallbacks._resample import resample_into
from chute.fallbacks._status import (
    BOX_OUTSIDE,
    CORRUPT,
    OK,
    SIZE_MISMATCH,
    TOO_LARGE,
    UNREADABLE,
)

__all__ = ["decode_with_pil", "decode_warned_jpeg", "resample_decoded"]

_BENIGN_WARNING = b"extraneous bytes before marker 0xd9"


def first_jpeg_warning(payload: np.ndarray) -> bytes | None:
    """libjpeg's first warning (or error) message for a JPEG, None if it decodes cleanly."""
    lib = _turbojpeg.load()
    handle = ctypes.c_void_p(lib.tjInitDecompress())
    try:
        buf = payload.ctypes.data_as(ctypes.c_void_p)
        size = ctypes.c_ulong(len(payload))
        dims = [ctypes.c_int() for _ in range(4)]
        if lib.tjDecompressHeader3(handle, buf, size, *(ctypes.byref(d) for d in dims)) != 0:
            return lib.tjGetErrorStr2(handle)
        width, height = dims[0].value, dims[1].value
        pixel_format = (_turbojpeg.TJPF_CMYK if dims[3].value in (_turbojpeg.TJCS_CMYK,
                        _turbojpeg.TJCS_YCCK) else _turbojpeg.TJPF_RGB)
        pixels = np.empty(width * height * 4, dtype=np.uint8)
        if lib.tjDecompress2(handle, buf, size, pixels.ctypes.data_as(ctypes.c_void_p), width,
                             0, height, pixel_format, _turbojpeg.TJFLAG_STOPONWARNING) != 0:
            return lib.tjGetErrorStr2(handle)
        return None
    finally:
        lib.tjDestroy(handle)


def decode_warned_jpeg(payload: np.ndarray) -> tuple[int, np.ndarray | None]:
    """(status, RGB pixels) for a JPEG the fast path's decoder warned about (its header passed
    the fast path's size checks, so they are not made again)."""
    payload = np.ascontiguousarray(payload)
    warning = first_jpeg_warning(payload)
    if warning is not None and _BENIGN_WARNING not in warning:
        return CORRUPT, None
    status, pixels = decode_with_pil(payload)
    return (CORRUPT, None) if status != OK else (status, pixels)


def decode_with_pil(payload: np.ndarray, size: tuple[int, int] | None = None,
                    max_pixels: int | None = None) -> tuple[int, np.ndarray | None]:
    """(status, RGB uint8 [H, W, 3] or None) for one encoded payload.

    size: the (height, width) the header must state, or None; max_pixels: the most pixels the
    header may state, or None (both checked before PIL decodes anything).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. EXIF/ICC chatter; failures still raise
            with Image.open(io.BytesIO(payload.tobytes())) as image:
                width, height = image.size
                if max_pixels is not None and width * height > max_pixels:
                    return TOO_LARGE, None
                if size is not None and (height, width) != tuple(size):
                    return SIZE_MISMATCH, None
                image.load()
                rgb = eight_bit(image).convert("RGB")  # 16-bit grey scaled, not clipped
    except UnidentifiedImageError:
        return UNREADABLE, None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return CORRUPT, None
    return OK, np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


@njit(nogil=True, cache=True)
def _resample_pixels(pixels, box, flip, out, b, kind, nchw, mean255, std255):
    height, width = pixels.shape[0], pixels.shape[1]
    top, left, box_h, box_w = box[0], box[1], box[2], box[3]
    if not (top >= -BOX_SLACK and left >= -BOX_SLACK and box_h > 0 and box_w > 0
            and top + box_h <= height + BOX_SLACK and left + box_w <= width + BOX_SLACK):
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
