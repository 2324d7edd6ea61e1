"""AudioOptions: how an audio field's samples are cut, resampled and perturbed
(docs/audio.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["AudioOptions"]


@dataclass(frozen=True)
class AudioOptions:
    """Options of one audio field: `fields={"audio": AudioOptions(unit="segment")}`.

    Args:
        sample_rate: resample every sample to this rate (default: each recording's own rate;
            a dataset of mixed rates then warns).
        mono: mix channels down to one.
        unit: what one sample of the Pipeline is: "recording" (a whole file) or "segment" (one
            timestamped segment listed in the `meta_field` field's "segments"; the other
            fields are read from its recording). Default: one dataset row.
        merge: (min_s, max_s) with unit="segment": adjacent segments of a recording merged into
            samples of about that many seconds, drawn anew each epoch from (seed, epoch).
        meta_field: the JSON field that lists each recording's segments.
        speeds: speed perturbation factors, one drawn per sample in train (e.g. (0.9, 1.0,
            1.1)).
        volume_db: (low, high) gain in dB drawn per sample in train.
        features: log mel filterbank features instead of waveforms (a dict, docs/audio.md).
        threads: decoding threads.
    """

    sample_rate: int | None = None
    mono: bool = True
    unit: Literal["recording", "segment"] | None = None
    merge: tuple[float, float] | None = None
    meta_field: str = "meta"
    speeds: tuple[float, ...] = (1.0,)
    volume_db: tuple[float, float] = (0.0, 0.0)
    features: dict[str, Any] | None = None
    threads: int | None = None
