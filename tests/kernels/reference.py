"""NumPy reference of resize definition #3 (common contract), written from the definition.

Float64 throughout, dense per-axis weight matrices; slow and obvious on purpose.
"""

from __future__ import annotations

import numpy as np


def axis_weights(out_size: int, start: float, extent: float, src_size: int) -> np.ndarray:
    """[out_size, src_size] matrix: row o holds the normalised taps of output index o."""
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


def resample(image: np.ndarray, box, out_h: int, out_w: int, flip: bool) -> np.ndarray:
    """Unrounded resampled values [out_h, out_w, 3] of an HWC image; box = (y0, x0, h, w)."""
    y0, x0, bh, bw = (float(v) for v in box)
    wy = axis_weights(out_h, y0, bh, image.shape[0])
    wx = axis_weights(out_w, x0, bw, image.shape[1])
    horizontal = np.einsum("px,yxc->ypc", wx, image.astype(np.float64))
    values = np.einsum("oy,ypc->opc", wy, horizontal)
    return values[:, ::-1] if flip else values


def finish(values: np.ndarray, dtype, mean, std) -> np.ndarray:
    """Rounding (uint8) or normalisation in float32 then cast (float16/float32); HWC."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return np.clip(np.floor(values + 0.5), 0, 255).astype(np.uint8)
    mean255 = np.asarray(mean, dtype=np.float32) * np.float32(255)
    std255 = np.asarray(std, dtype=np.float32) * np.float32(255)
    return ((values.astype(np.float32) - mean255) / std255).astype(dtype)


def reference_batch(images, boxes, flips, out_h, out_w, dtype, layout, mean, std) -> np.ndarray:
    """The whole output batch in the requested layout."""
    samples = [
        finish(resample(img, box, out_h, out_w, bool(flip)), dtype, mean, std)
        for img, box, flip in zip(images, boxes, flips, strict=True)
    ]
    batch = np.stack(samples)
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2)) if layout == "NCHW" else batch
