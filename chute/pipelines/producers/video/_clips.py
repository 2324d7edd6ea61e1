"""Which frames a clip takes: a ParamSource giving each sample's first frame, a pure function of
(seed, epoch, sample id) in training and the centred window in evaluation; or, with `spread`,
frames spread uniformly over the whole video (one per equal segment: at a keyed phase within
the segments in training, at their middles in evaluation) (docs/design.md, "Video clips")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform

__all__ = ["ClipParams", "clip_indices", "spread_clips"]


@dataclass(frozen=True)
class ClipParams:
    """`num_frames` frames `frame_interval` apart; `frames` is the dataset's num_frames column."""

    num_frames: int
    frame_interval: int
    mode: str
    frames: np.ndarray = field(compare=False, repr=False)
    spread: bool = False  # frames spread over the whole video (frame_interval unused)

    @property
    def span(self) -> int:
        return (self.num_frames - 1) * self.frame_interval + 1

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        if self.spread:
            if self.mode == "eval":
                phase = np.full(len(ids), 0.5)
            else:
                phase = uniform(derive_key(seed, epoch, "clip-spread"), ids.astype(np.uint64), 0)
            return {"clip_start": np.zeros(len(ids), np.int64),
                    "clip_phase": np.asarray(phase, np.float64)}
        room = np.maximum(self.frames[ids].astype(np.int64) - self.span, 0)
        if self.mode == "eval":
            start = room // 2
        else:
            u = uniform(derive_key(seed, epoch, "clip"), ids.astype(np.uint64), 0)
            start = np.floor(u * (room + 1)).astype(np.int64)
        return {"clip_start": start.astype(np.int64)}


def clip_indices(start: int, num_frames: int, frame_interval: int, frames: int,
                 phase: float | None = None) -> np.ndarray:
    """Frame numbers of one clip; a video shorter than the clip repeats its last frame. With
    `phase` (in [0, 1)) the frames are spread over the whole video instead: frame k of the
    clip is at (k + phase) / num_frames of it."""
    if phase is not None:
        at = np.floor((np.arange(num_frames) + phase) * frames / num_frames).astype(np.int64)
        return np.minimum(at, frames - 1)
    return np.minimum(start + np.arange(num_frames) * frame_interval, frames - 1)


def spread_clips(frames: int, clips: int, num_frames: int, frame_interval: int = 1) -> np.ndarray:
    """int64 [clips, num_frames] frame numbers of `clips` evaluation clips spread over a video
    of `frames` frames as sampling="uniform" spreads frames: clip k is centred on the middle of
    the k-th of `clips` equal segments (its start `floor((k + 1/2) * frames / clips - span / 2)`,
    moved inside the video); one clip is the centred eval clip. Each clip is `num_frames` frames
    `frame_interval` apart; a video shorter than a clip repeats its last frame.

    Args:
        frames: frames of the video.
        clips: clips to take (>= 1).
        num_frames: frames per clip.
        frame_interval: frames between two frames of a clip.
    """
    if clips < 1 or num_frames < 1 or frame_interval < 1:
        raise ValueError(f"spread_clips needs clips, num_frames and frame_interval >= 1, got "
                         f"{clips}, {num_frames}, {frame_interval}")
    span = (num_frames - 1) * frame_interval + 1
    k = np.arange(clips, dtype=np.int64)
    starts = ((2 * k + 1) * frames - clips * span) // (2 * clips)  # exact integer floor
    starts = np.clip(starts, 0, max(frames - span, 0))
    return np.stack([clip_indices(int(s), num_frames, frame_interval, frames) for s in starts])
