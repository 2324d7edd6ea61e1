"""Which frames a clip takes: a ParamSource giving each sample's first frame, a pure function of
(seed, epoch, sample id) in training and the centred window in evaluation
(docs/design.md, "Video clips")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform

__all__ = ["ClipParams", "clip_indices"]


@dataclass(frozen=True)
class ClipParams:
    """`num_frames` frames `frame_interval` apart; `frames` is the dataset's num_frames column."""

    num_frames: int
    frame_interval: int
    mode: str
    frames: np.ndarray = field(compare=False, repr=False)

    @property
    def span(self) -> int:
        return (self.num_frames - 1) * self.frame_interval + 1

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        room = np.maximum(self.frames[ids].astype(np.int64) - self.span, 0)
        if self.mode == "eval":
            start = room // 2
        else:
            u = uniform(derive_key(seed, epoch, "clip"), ids.astype(np.uint64), 0)
            start = np.floor(u * (room + 1)).astype(np.int64)
        return {"clip_start": start.astype(np.int64)}


def clip_indices(start: int, num_frames: int, frame_interval: int, frames: int) -> np.ndarray:
    """Frame numbers of one clip; a video shorter than the clip repeats its last frame."""
    return np.minimum(start + np.arange(num_frames) * frame_interval, frames - 1)
