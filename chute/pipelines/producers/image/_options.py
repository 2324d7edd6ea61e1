"""ImageOptions: how an image field is decoded and augmented (docs/images.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute.pipelines._common._options import (
    image_size_of,
    mean_std_fractions,
    output_dtype,
    suggest_options,
)
from chute.pipelines.producers.image._crops import CropConfig
from chute.pipelines.producers.image._views import View, check_view_total

__all__ = ["ImageOptions", "ImageBackend"]

ImageBackend = Literal["auto", "cpu", "dali", "dali-native", "nvimgcodec"]


@suggest_options
@dataclass(frozen=True)
class ImageOptions:
    """Options of one image field: `Pipeline(..., fields={"image": ImageOptions(size=224)})`.

    Args:
        size: output size: S (square), (H, W) or "HxW" (default 224, or the size of `crop`).
        backend: decoder: "cpu", "dali", "dali-native", "nvimgcodec" or "auto" (measured by the
            autotuner on this machine and dataset; see `chute autotune`).
        backend_options: the backend's own options (e.g. {"threads": 4}); yes/no options
            (dct_scaling, roi_decode) also take "true"/"false", "yes"/"no", "on"/"off", "1"/"0".
        dtype: "uint8", "float16", "bfloat16" (decoded as float32, cast on the device) or
            "float32" (torch dtypes work too).
        layout: "NCHW" or "NHWC".
        mean: per-channel means of float images: out = (pixel/255 - mean) / std; fractions of
            255 (0.485, ...) or, when any value is above 1, 0-255 units (123.675, ...).
        std: per-channel standard deviations, in the units of `mean`.
        crop: a `CropConfig` for train crops and flips (scale, ratio, flip_p, ...); its size,
            when set, is the output size.
        eval_crop: "torchvision" (Resize(round(S / 0.875)) then CenterCrop(S), the default) or
            "crop-resize" (FFCV's center box resized to S); None keeps `crop`'s.
        memory_format: `torch.channels_last` delivers NCHW images stored NHWC at no extra cost;
            `torch.contiguous_format` (default) is plain NCHW.
        views: a list of `View`s for multi-crop (DINO, SwAV): each image is decoded once and
            every view cropped, resized, flipped and normalised from that decode; the batch
            holds the field as a list of tensors in view order, `count` expanded
            (docs/views.md). Excludes `size`, `crop` and `eval_crop`; backends "cpu",
            "nvimgcodec" and "dali" (one kernel launch for all views on a GPU).
    """

    size: int | tuple[int, int] | str | None = None
    backend: ImageBackend = "auto"
    backend_options: Mapping[str, Any] | None = None
    dtype: str | torch.dtype = "float16"
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD
    crop: CropConfig | None = None
    eval_crop: Literal["torchvision", "crop-resize"] | None = None
    memory_format: torch.memory_format = torch.contiguous_format
    views: Sequence[View] | None = None

    def __post_init__(self) -> None:
        # what needs no dataset is checked here, where the mistake is made (docs/images.md)
        try:
            if self.size is not None:
                image_size_of(self.size)
            output_dtype(self.dtype)
            mean_std_fractions(self.mean, self.std)
        except ValueError as err:
            raise ValueError(f"ImageOptions: {err}") from None
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"ImageOptions: layout must be 'NCHW' or 'NHWC', got "
                             f"{self.layout!r}")
        if self.eval_crop not in (None, "torchvision", "crop-resize"):
            raise ValueError(f"ImageOptions: eval_crop must be 'torchvision', 'crop-resize' or "
                             f"None, got {self.eval_crop!r}")
        if isinstance(self.views, list):  # a frozen value: lists become tuples
            object.__setattr__(self, "views", tuple(self.views))
        if isinstance(self.views, tuple):
            check_view_total(self.views, "ImageOptions")
