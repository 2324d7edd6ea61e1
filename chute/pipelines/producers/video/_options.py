"""VideoOptions: how a video field's clips are decoded (docs/video.md)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal, get_args, get_type_hints

import numpy as np

from chute.pipelines._common._options import suggest_options

__all__ = ["VideoOptions", "clip_size"]


@suggest_options
@dataclass(frozen=True)
class VideoOptions:
    """Options of one video field: `fields={"video": VideoOptions(num_frames=16)}`.

    Args:
        num_frames: frames per clip (under `Buckets`, each bucket's own count).
        frame_interval: take every k-th frame.
        size: output (H, W) or S; None keeps the stored size (all clips of a batch must then
            share it). Under `Buckets`, each bucket's resolution.
        dtype: "uint8", "float16" or "float32" (pixel values 0-255).
        layout: "CTHW" or "TCHW" per clip.
        crop: "center", or "random" (train only; eval is always centred).
        backend: "cpu" (PyAV), "dali" (DALI's video reader), "nvdec" (the GPU's hardware
            decoders through PyNvVideoCodec) or "auto" (measured on this dataset; the choice
            is in `pipe.stats.field_backends`).
        threads: decoding threads (default: the usable CPUs).
        sampling: "window" (`num_frames` frames `frame_interval` apart: a keyed start in
            training, centred in eval) or "uniform" (spread over the whole video, one frame
            per equal segment: a keyed phase in training, segment middles in eval).
        short: a video shorter than a clip's span: "repeat" its last frame (the batch's
            `clip_valid_frames` counts the real ones) or "error" (refused when the Pipeline
            is built, naming the videos).
    """

    num_frames: int = 16
    frame_interval: int = 1
    size: int | tuple[int, int] | None = (256, 256)
    dtype: Literal["uint8", "float16", "float32"] = "uint8"
    layout: Literal["CTHW", "TCHW"] = "CTHW"
    crop: Literal["center", "random"] = "center"
    backend: Literal["cpu", "dali", "nvdec", "auto"] = "cpu"
    threads: int | None = None
    sampling: Literal["window", "uniform"] = "window"
    short: Literal["repeat", "error"] = "repeat"

    def __post_init__(self) -> None:
        # checked here, where the mistake is made, not when a Pipeline is built (docs/video.md)
        for name in ("num_frames", "frame_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"VideoOptions: {name} must be a whole number >= 1, got "
                                 f"{value!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(
                self.threads, numbers.Integral) or self.threads < 1):
            raise ValueError(f"VideoOptions: threads must be a whole number >= 1 or None, got "
                             f"{self.threads!r}")
        clip_size(self.size)
        hints = get_type_hints(VideoOptions)
        for name in ("dtype", "layout", "crop", "backend", "sampling", "short"):
            allowed = get_args(hints[name])
            if getattr(self, name) not in allowed:
                raise ValueError(f"VideoOptions: {name} must be one of {list(allowed)}, got "
                                 f"{name}={getattr(self, name)!r}")


def clip_size(value) -> tuple[int, int] | None:
    """(H, W) of a clip size option: S or (H, W), each >= 1; None keeps the stored size.

    Args:
        value: `VideoOptions.size`.
    """
    if value is None:
        return None
    size: tuple = ()
    # a string ("64x48", as ImageOptions takes it) is refused below in words, not by int()
    if not isinstance(value, str):
        try:
            size = ((int(value), int(value)) if np.ndim(value) == 0
                    else tuple(int(v) for v in value))
        except (TypeError, ValueError):
            pass
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"video option size must be (H, W) >= 1 or an int, got {value!r} "
                         "(e.g. size=(256, 256) or size=256)")
    return size
