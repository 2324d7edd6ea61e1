"""NumPy reference of the resize definition (docs/design.md, "Resize definition"), written
from the definition and shared by the CPU fallback and kernel tests.

Float64 throughout, dense per-axis weight matrices; slow and obvious on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["axis_weights", "resample", "round_uint8", "finish", "reference_batch"]

Box = Sequence[float]  # (top, left, height, width) in source pixels


def axis_weights(out_size: int, start: float, extent: float, src_size: int) -> np.ndarray:
    """[out_size, src_size] matrix: row o holds the normalised taps of output index o.

    Args:
        out_size: output samples along this axis.
        start, extent: the box along this axis, in source pixels.
        src_size: source samples along this axis.
    """
    scale = extent / out_size
    support = max(scale, 1.0)
    weights = np.zeros((out_size, src_size))
    for o in range(out_size):
        center = start + (o + 0.5) * scale
        first = max(int(center - support + 0.5), 0)  # int() truncates toward zero, like C
        stop = min(int(center + support + 0.5), src_size)
        taps = np.arange(first, stop)
        w = np.maximum(0.0, 1.0 - np.abs((taps + 0.5 - center) / support))
        if w.sum() > 0:
            weights[o, first:stop] = w / w.sum()
    return weights


def resample(image: np.ndarray, box: Box, out_h: int, out_w: int,
             flip: bool = False) -> np.ndarray:
    """Unrounded resampled values [out_h, out_w, 3] (float64) of an HWC image.

    Args:
        image: [H, W, 3] pixels.
        box: (top, left, height, width) in source pixels, fractions allowed.
        out_h, out_w: output size.
        flip: mirror the result horizontally.
    """
    y0, x0, bh, bw = (float(v) for v in box)
    wy = axis_weights(out_h, y0, bh, image.shape[0])
    wx = axis_weights(out_w, x0, bw, image.shape[1])
    horizontal = np.einsum("px,yxc->ypc", wx, image.astype(np.float64))
    values = np.einsum("oy,ypc->opc", wy, horizontal)
    return values[:, ::-1] if flip else values


def round_uint8(values: np.ndarray) -> np.ndarray:
    """Resampled values as uint8 outputs are defined: rounded half up, clamped to 0..255."""
    return np.clip(np.floor(values + 0.5), 0, 255).astype(np.uint8)


def finish(values: np.ndarray, dtype: DTypeLike, mean: Sequence[float],
           std: Sequence[float]) -> np.ndarray:
    """Rounding (uint8) or normalisation in float32 then cast (float16/float32); HWC.

    Args:
        values: resampled values, as `resample` returns them.
        dtype: the output dtype.
        mean, std: per-channel normalisation in [0, 1] units (unused for uint8).
    """
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return round_uint8(values)
    mean255 = np.asarray(mean, dtype=np.float32) * np.float32(255)
    std255 = np.asarray(std, dtype=np.float32) * np.float32(255)
    return ((values.astype(np.float32) - mean255) / std255).astype(dtype)


def reference_batch(images: Sequence[np.ndarray], boxes: Sequence[Box], flips: Sequence[bool],
                    out_h: int, out_w: int, dtype: DTypeLike, layout: str,
                    mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """The whole output batch in the requested layout ("NCHW" or "NHWC").

    Args:
        images, boxes, flips: per sample, as for `resample`.
        out_h, out_w: output size.
        dtype, mean, std: as for `finish`.
        layout: "NCHW" or "NHWC".
    """
    samples = [
        finish(resample(img, box, out_h, out_w, bool(flip)), dtype, mean, std)
        for img, box, flip in zip(images, boxes, flips, strict=True)
    ]
    batch = np.stack(samples)
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2)) if layout == "NCHW" else batch
