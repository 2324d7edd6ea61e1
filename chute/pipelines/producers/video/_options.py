"""VideoOptions: how a video field's clips are decoded (docs/video.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["VideoOptions"]


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
        backend: "cpu" (PyAV), "dali" (DALI's video reader) or "auto" (measured on this
            dataset; the choice is in `pipe.stats.field_backends`).
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
    backend: Literal["cpu", "dali", "auto"] = "cpu"
    threads: int | None = None
    sampling: Literal["window", "uniform"] = "window"
    short: Literal["repeat", "error"] = "repeat"
