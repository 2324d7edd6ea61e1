"""Crop box geometry shared by every image backend (docs/design.md, "Resize definition").

A box is (top, left, height, width) in source pixels, floats allowed: the PIL/torchvision
convention, where pixel j covers [j, j + 1) and the box [top, top + height) may start and end
inside a pixel. The resample of a box reads up to ceil(max(extent / out, 1)) pixels beyond it;
a decoder that decodes only a region adds one more pixel per side, because fancy chroma
upsampling makes a region's edge pixels differ from the full frame's. Everything that turns a
box into pixels to decode (the CPU ROI decoder, DALI's and nvImageCodec's decode windows) takes
its window from here, so the pixels the resample reads are those of a full decode.

NumPy and the standard library only: the CPU kernels jit `decode_span` with Numba.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BOX_SLACK", "decode_span", "decode_windows", "boxes_outside"]

# Source pixels a box may overhang its image: float rounding of boxes computed from a resize.
BOX_SLACK = 1e-3
# Pixels beyond the resample's taps: fancy upsampling changes a region's edge pixels.
_EDGE = 2


def decode_span(lo, length, out_size, size):
    """[first, stop) of the pixels one axis of the resample of a box reads, with the margin,
    clamped to [0, size).

    Args:
        lo: the box's start along this axis (source pixels, may be fractional).
        length: the box's extent along this axis (> 0).
        out_size: output pixels along this axis.
        size: the source's pixels along this axis.
    """
    margin = int(math.ceil(max(length / out_size, 1.0))) + _EDGE
    return (max(int(math.floor(lo)) - margin, 0),
            min(int(math.ceil(lo + length)) + margin, size))


def decode_windows(boxes, image_sizes, out_size=None) -> tuple[np.ndarray, np.ndarray]:
    """The decode windows of a region decode that feeds the resample, and the boxes inside them.

    Args:
        boxes: [B, 4] (top, left, height, width) in full-image pixels, fractions allowed.
        image_sizes: [B, 2] (height, width) of the full images.
        out_size: (out_h, out_w) of the resample, to add its margin (`decode_span`); None for
            the smallest window of whole pixels holding the box (an integer box is its own
            window).

    Returns:
        (windows [B, 4] int32 (top, left, height, width), inner [B, 4] float32 boxes relative to
        their window).
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    sizes = np.asarray(image_sizes, dtype=np.int64).reshape(-1, 2)
    lo, length = boxes[:, :2], boxes[:, 2:]
    if out_size is None:
        margin = np.zeros(length.shape, dtype=np.int64)
    else:
        out = np.asarray(out_size, dtype=np.float64).reshape(1, 2)
        margin = np.ceil(np.maximum(length / out, 1.0)).astype(np.int64) + _EDGE
    first = np.maximum(np.floor(lo).astype(np.int64) - margin, 0)
    stop = np.minimum(np.ceil(lo + length).astype(np.int64) + margin, sizes)
    windows = np.concatenate([first, stop - first], axis=1).astype(np.int32)
    inner = np.concatenate([lo - first, length], axis=1).astype(np.float32)
    return windows, inner


def boxes_outside(boxes, image_sizes, slack: float = 0.0) -> np.ndarray:
    """bool [B]: which boxes are not finite, have no positive size or leave their image by more
    than `slack` pixels.

    Args:
        boxes: [B, 4] (top, left, height, width).
        image_sizes: [B, 2] (height, width).
        slack: pixels a box may overhang (float rounding).
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    sizes = np.asarray(image_sizes, dtype=np.float64).reshape(-1, 2)
    bad = ~np.isfinite(boxes).all(axis=1)
    with np.errstate(invalid="ignore"):
        bad |= (boxes[:, 2:] <= 0).any(axis=1)
        bad |= (boxes[:, :2] < -slack).any(axis=1)
        bad |= (boxes[:, :2] + boxes[:, 2:] > sizes + slack).any(axis=1)
    return bad
