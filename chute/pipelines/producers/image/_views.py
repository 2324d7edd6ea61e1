"""Multi-crop views: several independently cropped, resized and flipped views of one decode of
each image (DINO, SwAV, iBOT; docs/views.md).

`ImageOptions(views=[View(224, scale=(0.32, 1.0), count=2), View(96, scale=(0.05, 0.32),
count=6)])` expands to 8 views in that order. View v of a sample takes the crop that a
single-view Pipeline with seed `view_seed(seed, v)` gives that sample: its box and flip are a
pure function of (seed, epoch, sample, v), the same on every rank, backend and resume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute.pipelines._common._options import image_size_of
from chute.pipelines.producers.image._crops import CropConfig, crop_boxes
from chute.pipelines.sampling._keyed_random import derive_key

__all__ = ["MAX_VIEWS", "View", "ViewParams", "expand_views", "view_key", "view_seed"]

# The most views of one sample, `count` expanded (DINO takes 8, iBOT 12): the CPU decoder hands
# every view's output to one parallel loop, which numba bounds at 100 arrays.
MAX_VIEWS = 64


@dataclass(frozen=True)
class View:
    """One kind of view of an image field (`ImageOptions(views=[...])`).

    Args:
        size: output size of this view: S (square), (H, W) or "HxW".
        scale: area fraction of the crop, uniform in [lo, hi] (torchvision RandomResizedCrop).
        ratio: aspect ratio range of the crop, log-uniform.
        flip_p: probability of a horizontal flip.
        count: how many views of this kind each sample gets (each with its own crop and flip).
        attempts: tries for a box inside the image before the centre fallback.
        transform: `callable(tensor) -> tensor` applied to this view's batch [B, 3, h, w] on the
            output device after the field's dtype cast (a colour jitter, a blur, ...); None:
            none.
    """

    size: int | tuple[int, int] | str
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    count: int = 1
    attempts: int = 10
    transform: Callable[[Any], Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or \
                not 1 <= self.count <= MAX_VIEWS:
            raise ValueError(f"View.count must be an integer from 1 to {MAX_VIEWS} (the most "
                             f"views of a sample), got {self.count!r:.40}")
        if self.transform is not None and not callable(self.transform):
            raise TypeError(f"View.transform must be callable(tensor) -> tensor, got "
                            f"{self.transform!r:.80}")
        object.__setattr__(self, "size", image_size_of(self.size))
        self.crop("train")  # the crop ranges are checked as CropConfig checks them

    def crop(self, augment: str) -> CropConfig:
        """This view's crop config in mode `augment` ("train" or "eval")."""
        size: Any = self.size
        scale: Any = tuple(self.scale)
        ratio: Any = tuple(self.ratio)
        return CropConfig(size=size, mode=augment, scale=scale, ratio=ratio,
                          attempts=self.attempts, flip_p=self.flip_p)


def expand_views(views: Sequence[View], where: str) -> tuple[View, ...]:
    """One View per delivered view (each `count` expanded), in order.

    Args:
        views: what `ImageOptions.views` holds.
        where: how errors name the field.
    """
    if isinstance(views, View) or not isinstance(views, Sequence) or not views:
        raise ValueError(f"{where}: views must be a non-empty list of chute.View, got "
                         f"{views!r:.100}")
    bad = [v for v in views if not isinstance(v, View)]
    if bad:
        raise ValueError(f"{where}: views must hold chute.View(...) items, got "
                         f"{type(bad[0]).__name__}")
    check_view_total(views, where)
    return tuple(v for v in views for _ in range(v.count))


def check_view_total(views: Sequence[View], where: str) -> None:
    """A ValueError naming `where` when `views` make more than MAX_VIEWS views per sample."""
    total = sum(v.count for v in views if isinstance(v, View))
    if total > MAX_VIEWS:
        raise ValueError(f"{where}: views make {total} views per sample (count expanded); at "
                         f"most {MAX_VIEWS}")


def view_seed(seed: int, view: int) -> int:
    """The seed whose single-view crops view `view` of a Pipeline seeded `seed` takes: a
    Pipeline over the same samples with `seed=view_seed(seed, v)` and view v's crop config
    draws the same boxes and flips (a non-negative 63-bit integer).

    Args:
        seed: the Pipeline's seed.
        view: the view's index after `count` expansion (0-based).
    """
    return derive_key(int(seed), "view", int(view)) >> 1


def view_key(field_name: str, view: int) -> str:
    """The output key of view `view` of an image field (the Pipeline delivers the views as one
    list under the field's name)."""
    return f"{field_name}[{view}]"


@dataclass(frozen=True)
class ViewParams:
    """Crop boxes float64 [B, V, 4] and flips bool [B, V] of every view of image samples, under
    the keys "<field>.view_boxes" and "<field>.view_flips"."""

    field_name: str
    crops: tuple[CropConfig, ...]
    heights: np.ndarray = field(compare=False, repr=False)
    widths: np.ndarray = field(compare=False, repr=False)

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        heights, widths = self.heights[ids], self.widths[ids]
        boxes = np.empty((len(ids), len(self.crops), 4), dtype=np.float64)
        flips = np.empty((len(ids), len(self.crops)), dtype=bool)
        for v, crop in enumerate(self.crops):
            boxes[:, v], flips[:, v] = crop_boxes(view_seed(seed, v), epoch, ids, heights,
                                                  widths, crop)
        return {f"{self.field_name}.view_boxes": boxes, f"{self.field_name}.view_flips": flips}
