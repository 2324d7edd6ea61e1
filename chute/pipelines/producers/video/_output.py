"""A decoded clip in the output's dtype and layout: uint8 as decoded, or float scaled to
[-1, 1] (the range video diffusion and recognition models take)."""

from __future__ import annotations

import numpy as np

__all__ = ["to_output"]


def to_output(frames: np.ndarray, dtype: str, layout: str = "TCHW") -> np.ndarray:
    """uint8 [T, H, W, 3] -> [T, 3, H, W] (or [3, T, H, W] for layout "CTHW") in `dtype`
    (float: x / 127.5 - 1 in float32, then rounded to `dtype`).

    NumPy, one pass per step on the calling thread: clips convert in parallel on the decoding
    threads, where torch's own intra-op threads would only compete with them.
    """
    x = frames.transpose((3, 0, 1, 2) if layout == "CTHW" else (0, 3, 1, 2))
    if dtype == "uint8":
        return np.ascontiguousarray(x)
    out = np.empty(x.shape, np.float32)
    np.divide(x, np.float32(127.5), out=out, dtype=np.float32)
    out -= np.float32(1.0)
    return out if dtype == "float32" else out.astype(dtype)
