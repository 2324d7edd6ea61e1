"""Speed and volume perturbation of audio samples: a ParamSource whose choices are a pure
function of (seed, epoch, sample id), so every rank, thread and resume makes the same ones
(docs/design.md, "Audio")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, random_u64, uniform

__all__ = ["AudioPerturbation"]


@dataclass(frozen=True)
class AudioPerturbation:
    """"speed" (a factor drawn from `speeds`; 1.1 plays 10 % faster: 1/1.1 as many frames) and
    "gain" (linear, from a dB value uniform in `volume_db`) per sample.

    Attributes:
        speeds: the factors to choose from, equally likely (e.g. (0.9, 1.0, 1.1)).
        volume_db: (low, high) gain in dB; (0, 0) leaves the volume alone.
    """

    speeds: tuple[float, ...] = (1.0,)
    volume_db: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        # NaN passes a plain comparison, and a NaN or infinite gain or speed turns the audio
        # into NaN or nothing: only finite values
        speeds = np.asarray(self.speeds, np.float64)
        if not speeds.size or not np.isfinite(speeds).all() or speeds.min() <= 0:
            raise ValueError(f"speeds must be positive finite factors, got {self.speeds}")
        gains = np.asarray(self.volume_db, np.float64)
        if gains.shape != (2,) or not np.isfinite(gains).all() or gains[0] > gains[1]:
            raise ValueError(f"volume_db must be (low, high) in finite dB with low <= high, "
                             f"got {self.volume_db}")

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        key = derive_key(seed, epoch, "audio-perturb")
        pick = random_u64(key, ids, stream=0) % np.uint64(len(self.speeds))
        speed = np.asarray(self.speeds, np.float64)[pick.astype(np.int64)]
        low, high = self.volume_db
        db = low + (high - low) * uniform(key, ids, stream=1)
        return {"speed": speed, "gain": (10.0 ** (db / 20.0)).astype(np.float32)}
