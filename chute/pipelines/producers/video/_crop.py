"""Where a clip's spatial crop sits: a ParamSource giving each sample a vertical and a
horizontal fraction in [0, 1), a pure function of (seed, epoch, sample id), so a resumed run
crops exactly as an uninterrupted one (docs/design.md, "Video clips")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform

__all__ = ["VideoCropParams", "CROPS"]

CROPS = ("center", "random")


@dataclass(frozen=True)
class VideoCropParams:
    """Random crop positions of training clips ("crop_y", "crop_x"; the same for every frame
    of a clip; `decode_frames` turns them into pixel offsets)."""

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        key = derive_key(seed, epoch, "vcrop")
        counters = np.asarray(ids).astype(np.uint64)
        return {"crop_y": uniform(key, counters, 0), "crop_x": uniform(key, counters, 1)}

