"""Resizing decoded frames to fill an output size: the largest centred box of the output's
aspect ratio, resized with antialiased bilinear filtering (torch), then the output dtype
(uint8, or float scaled to [-1, 1])."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["fill_resize", "centre_box", "to_output"]


def centre_box(height: int, width: int, out_h: int, out_w: int) -> tuple[int, int, int, int]:
    """(top, left, h, w): the largest centred box of the output's aspect ratio."""
    scale = min(height / out_h, width / out_w)
    h = min(height, max(1, round(out_h * scale)))
    w = min(width, max(1, round(out_w * scale)))
    return (height - h) // 2, (width - w) // 2, h, w


def fill_resize(frames: np.ndarray, size: tuple[int, int], dtype: str) -> np.ndarray:
    """uint8 [T, H, W, 3] frames -> [T, 3, size...] in `dtype` (float: [-1, 1])."""
    out_h, out_w = size
    t, height, width, _ = frames.shape
    top, left, h, w = centre_box(height, width, out_h, out_w)
    x = torch.from_numpy(np.ascontiguousarray(frames[:, top:top + h, left:left + w]))
    x = x.permute(0, 3, 1, 2)
    if (h, w) != (out_h, out_w):
        x = F.interpolate(x.float(), size=(out_h, out_w), mode="bilinear", antialias=True,
                          align_corners=False)
    if dtype == "uint8":
        return x.round().clamp_(0, 255).to(torch.uint8).numpy() if x.is_floating_point() \
            else x.numpy()
    return (x.float() / 127.5 - 1.0).to(getattr(torch, dtype)).numpy()


def to_output(frames: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 [T, H, W, 3] -> [T, 3, H, W] in `dtype` (float: [-1, 1])."""
    x = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
    if dtype == "uint8":
        return x
    return (torch.from_numpy(x).float() / 127.5 - 1.0).to(getattr(torch, dtype)).numpy()
