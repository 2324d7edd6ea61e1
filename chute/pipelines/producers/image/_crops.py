"""Crop boxes and flips: a vectorised pure function of (seed, epoch, sample ids, image sizes).

Every backend (CPU fallback, DALI, CUDA kernels) takes its crops from here, so the same sample
gets the same crop everywhere. Randomness is keyed and counter-based (`_keyed_random`): a
sample's box depends only on (seed, epoch, sample id, its height/width, config), never on the
rest of the batch, the rank, the thread or the order of calls.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform, uniform_streams

__all__ = ["CropConfig", "CropParams", "crop_boxes", "resized_size", "EVAL_CROPS", "MAX_ATTEMPTS"]

# How eval crops are made (CropConfig.eval_crop); the first is the default.
EVAL_CROPS = ("torchvision", "crop-resize")

# The most tries for a train box (torchvision takes 10): every try is drawn for every sample of a
# batch at once, 2 float64 per try and sample.
MAX_ATTEMPTS = 100

# Streams of the keyed generator: attempt k draws area from 2k and ratio from 2k + 1.
_STREAM_TOP = 1_000_001
_STREAM_LEFT = 1_000_002
_STREAM_FLIP = 1_000_003


@dataclass(frozen=True)
class CropConfig:
    """How crops are drawn.

    train: torchvision RandomResizedCrop (area fraction uniform in `scale`, aspect ratio
    log-uniform in `ratio`, `attempts` tries, then the central-crop fallback) + horizontal flip
    with probability `flip_p`.
    eval, `eval_crop="torchvision"` (the default): torchvision's evaluation transform,
    `Resize(round(S / crop_fraction))` (shorter side, bilinear, antialiased) then
    `CenterCrop(S)`, as the equivalent fractional box of the source (the resize's long side is
    truncated as torchvision truncates it, the crop offset rounded as CenterCrop rounds it). An
    (H, W) size resizes the image, keeping its aspect ratio, to the smallest size covering
    (round(H / crop_fraction), round(W / crop_fraction)) (for H == W exactly the shorter-side
    resize), then center crops (H, W).
    eval, `eval_crop="crop-resize"`: the central box of whole pixels of the output's aspect ratio
    covering `crop_fraction` of the largest such box that fits the image, resized to the
    output (FFCV's definition). No flip in eval.
    """

    size: tuple[int, int] | None = None  # None: the Pipeline's image_size
    mode: str = "train"
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    attempts: int = 10
    flip_p: float = 0.5
    crop_fraction: float = 0.875
    eval_crop: str = "torchvision"

    def __post_init__(self) -> None:
        self._check_ranges()
        if self.size is None:
            return
        given: Any = self.size  # an int is accepted too (a square size)
        size = tuple(int(s) for s in (given if np.ndim(given) else (given,) * 2))
        object.__setattr__(self, "size", size)
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"CropConfig.size must be (H, W) with H, W >= 1, got {self.size!r}")

    def _check_ranges(self) -> None:
        if self.mode not in ("train", "eval"):
            raise ValueError(f"CropConfig.mode must be 'train' or 'eval', got {self.mode!r}")
        if self.eval_crop not in EVAL_CROPS:
            raise ValueError(f"CropConfig.eval_crop must be one of {EVAL_CROPS}, got "
                             f"{self.eval_crop!r}")
        lo, hi = self.scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"CropConfig.scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")
        rlo, rhi = self.ratio
        if not 0 < rlo <= rhi:
            raise ValueError(f"CropConfig.ratio must satisfy 0 < lo <= hi, got {self.ratio}")
        attempts = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, numbers.Integral) or \
                not 0 <= attempts <= MAX_ATTEMPTS:
            raise ValueError(f"CropConfig.attempts must be an integer from 0 to {MAX_ATTEMPTS} "
                             f"(torchvision takes 10), got {attempts!r:.40}")
        if not 0 <= self.flip_p <= 1:
            raise ValueError(f"CropConfig.flip_p must be in [0, 1], got {self.flip_p}")
        if not 0 < self.crop_fraction <= 1:
            raise ValueError(
                f"CropConfig.crop_fraction must be in (0, 1], got {self.crop_fraction}"
            )


def crop_boxes(
    seed: int,
    epoch: int,
    ids: np.ndarray,
    heights: np.ndarray,
    widths: np.ndarray,
    config: CropConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes float64 [B, 4] as (top, left, height, width) in full-image pixels, and flips bool
    [B]. Train and "crop-resize" boxes are whole pixels; "torchvision" eval boxes are fractional
    (docs/design.md, "Resize definition").

    `heights` / `widths` are the full image sizes of the samples `ids` (same length).
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    heights = np.asarray(heights, dtype=np.int64).reshape(-1)
    widths = np.asarray(widths, dtype=np.int64).reshape(-1)
    if not len(ids) == len(heights) == len(widths):
        raise ValueError(
            f"crop_boxes: ids, heights and widths differ in length "
            f"({len(ids)}, {len(heights)}, {len(widths)})"
        )
    if len(ids) and (heights.min() < 1 or widths.min() < 1):
        bad = int(np.flatnonzero((heights < 1) | (widths < 1))[0])
        raise ValueError(
            f"crop_boxes: sample {int(ids[bad])} has image size "
            f"{int(heights[bad])}x{int(widths[bad])}; sizes must be >= 1 (check the dataset's "
            f"height/width columns)"
        )
    key = derive_key(seed, epoch, "crop")
    counters = ids.astype(np.uint64)
    if config.mode == "eval":
        boxes = _eval_boxes(heights, widths, config)
        flips = np.zeros(len(ids), dtype=bool)
    else:
        boxes = _train_boxes(key, counters, heights, widths, config)
        flips = uniform(key, counters, _STREAM_FLIP) < config.flip_p
    return boxes, flips


def _train_boxes(key, counters, heights, widths, config: CropConfig) -> np.ndarray:
    n = len(counters)
    area = (heights * widths).astype(np.float64)
    log_lo, log_hi = math.log(config.ratio[0]), math.log(config.ratio[1])
    box_h, box_w = _center_fallback(heights, widths, config.ratio)
    # Every attempt's draws at once (attempt k: area from stream 2k, ratio from 2k + 1), then
    # the first attempt whose box fits, as torchvision's loop takes it: one vectorised pass
    # instead of a dozen small NumPy calls per attempt (docs/views.md: views draw one crop per
    # view per batch).
    attempts = config.attempts
    draws = uniform_streams(key, counters, [*range(2 * attempts), _STREAM_TOP, _STREAM_LEFT])
    u_area, u_ratio = draws[0:2 * attempts:2], draws[1:2 * attempts:2]
    target = area * (config.scale[0] + u_area * (config.scale[1] - config.scale[0]))
    aspect = np.exp(log_lo + u_ratio * (log_hi - log_lo))
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    ok = (w > 0) & (w <= widths) & (h > 0) & (h <= heights)
    found = ok.any(axis=0)
    if attempts:  # (argmax needs at least one attempt)
        first, cols = ok.argmax(axis=0), np.arange(n)
        box_h = np.where(found, h[first, cols], box_h)
        box_w = np.where(found, w[first, cols], box_w)
    # torchvision: a random position for a found box, the centre for the fallback.
    span_h = (heights - box_h + 1).astype(np.float64)
    span_w = (widths - box_w + 1).astype(np.float64)
    rand_top = np.floor(draws[-2] * span_h).astype(np.int64)
    rand_left = np.floor(draws[-1] * span_w).astype(np.int64)
    top = np.where(found, rand_top, (heights - box_h) // 2)
    left = np.where(found, rand_left, (widths - box_w) // 2)
    return np.stack([top, left, box_h, box_w], axis=1).astype(np.float64)


def _center_fallback(heights, widths, ratio) -> tuple[np.ndarray, np.ndarray]:
    """torchvision's fallback: the whole image, clipped to the ratio range."""
    in_ratio = widths / heights
    lo, hi = min(ratio), max(ratio)
    box_h = heights.copy()
    box_w = widths.copy()
    narrow = in_ratio < lo
    wide = in_ratio > hi
    box_h = np.where(narrow, np.round(widths / lo).astype(np.int64), box_h)
    box_w = np.where(wide, np.round(heights * hi).astype(np.int64), box_w)
    return np.clip(box_h, 1, heights), np.clip(box_w, 1, widths)


def _eval_boxes(heights, widths, config: CropConfig) -> np.ndarray:
    if config.eval_crop == "torchvision":
        return _torchvision_boxes(heights, widths, config)
    assert config.size is not None  # eval boxes are shaped like the output (image_size)
    out_h, out_w = config.size
    # Largest box of the output's aspect ratio inside the image, then crop_fraction of it.
    fit = np.minimum(heights / out_h, widths / out_w) * config.crop_fraction
    box_h = np.clip(np.round(out_h * fit).astype(np.int64), 1, heights)
    box_w = np.clip(np.round(out_w * fit).astype(np.int64), 1, widths)
    top = np.round((heights - box_h) / 2.0).astype(np.int64)
    left = np.round((widths - box_w) / 2.0).astype(np.int64)
    return np.stack([top, left, box_h, box_w], axis=1).astype(np.float64)


def resized_size(heights, widths, size, crop_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The (height, width) torchvision's eval transform resizes each image to before its center
    crop: `Resize(round(S / crop_fraction))` on the shorter side for a square size S (the long
    side truncated: int(R * long / short)); for (H, W) the aspect-preserving size covering
    (round(H / crop_fraction), round(W / crop_fraction)), the other side truncated alike.

    Args:
        heights, widths: int [B] image sizes.
        size: the output (H, W).
        crop_fraction: the center crop's share of the resized image.
    """
    heights = np.asarray(heights, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    # Python's round (half to even), as in round(224 / 0.875).
    target_h, target_w = (int(round(s / crop_fraction)) for s in size)
    # The side needing the larger scale gets its target exactly: for a square target the
    # shorter side (a square image gives the same size either way).
    by_height = target_h * widths >= target_w * heights
    # torchvision computes int(requested * long / short) in floating point, in that order.
    new_w = np.where(by_height, np.floor(target_h * widths / heights), target_w)
    new_h = np.where(by_height, target_h, np.floor(target_w * heights / widths))
    # The truncated side may fall one short of its own target only through float rounding.
    new_h = np.maximum(new_h, target_h).astype(np.int64)
    new_w = np.maximum(new_w, target_w).astype(np.int64)
    return new_h, new_w


def _torchvision_boxes(heights, widths, config: CropConfig) -> np.ndarray:
    assert config.size is not None  # eval boxes are shaped like the output (image_size)
    out_h, out_w = config.size
    new_h, new_w = resized_size(heights, widths, config.size, config.crop_fraction)
    # CenterCrop: int(round((resized - crop) / 2.0)), in the resized image's pixels.
    crop_top = np.round((new_h - out_h) / 2.0)
    crop_left = np.round((new_w - out_w) / 2.0)
    # Output pixel o of the crop is resized pixel crop_top + o, whose centre maps to source
    # (crop_top + o + 0.5) * H / new_h: the box below has exactly those centres and the
    # resize's scale, so resampling it equals resizing then cropping.
    sy = heights / new_h
    sx = widths / new_w
    top, left = crop_top * sy, crop_left * sx
    box_h = np.minimum(out_h * sy, heights - top)
    box_w = np.minimum(out_w * sx, widths - left)
    return np.stack([top, left, box_h, box_w], axis=1).astype(np.float64)


@dataclass(frozen=True)
class CropParams:
    """Crop boxes and flips of image samples ("boxes", "flips"), from their full sizes."""

    config: CropConfig
    heights: np.ndarray = field(compare=False, repr=False)
    widths: np.ndarray = field(compare=False, repr=False)

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        boxes, flips = crop_boxes(seed, epoch, ids, self.heights[ids], self.widths[ids],
                                  self.config)
        return {"boxes": boxes, "flips": flips}
