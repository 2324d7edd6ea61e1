"""A decoded clip in the output's dtype and layout: uint8 as decoded, or float scaled to
[-1, 1] (the range video diffusion and recognition models take)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["to_output"]


def to_output(frames: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 [T, H, W, 3] -> [T, 3, H, W] in `dtype` (float: [-1, 1])."""
    x = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
    if dtype == "uint8":
        return x
    return (torch.from_numpy(x).float() / 127.5 - 1.0).to(getattr(torch, dtype)).numpy()
