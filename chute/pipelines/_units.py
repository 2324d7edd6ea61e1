"""Sample units: what a plan's sample id addresses (docs/design.md, "Audio").

With `unit="recording"` sample k is row k of the dataset. With `unit="segment"` sample k is
one timestamped segment of one recording: the segments listed in each recording's metadata are
numbered recording by recording, and a prefix sum over the per-recording counts maps k to its
recording in O(log R) with no per-segment copy of any audio. Order, partition, resume and
substitution work on sample ids unchanged; a `SampleUnit` is the ParamSource that turns them
into ("recording", "segment", "start_frame", "stop_frame"), and `ByRecording` lets a producer
of a stored field read the recording row of each sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from chute.errors import FormatError
from chute.pipelines._producer import Output

__all__ = ["UNITS", "SampleUnit", "sample_unit", "sample_durations", "ByRecording"]

UNITS = ("recording", "segment")


@dataclass(frozen=True)
class SampleUnit:
    """ParamSource: sample ids -> "recording" (dataset row), "segment" (index in the
    recording's segment list; -1 for a whole recording), "start_frame" and "stop_frame" (the
    frames of that recording the sample covers, at the recording's own rate).

    Attributes:
        name: "recording" or "segment".
        n: number of samples.
        first: int64 [R+1]: sample id of each recording's first segment (prefix sums).
        starts, stops: int64 [n] frames of each segment; for unit "recording", stops holds the
            recordings' frame counts and starts is empty.
    """

    name: str
    n: int
    fingerprint: str = ""
    first: np.ndarray = field(compare=False, repr=False, default=None)
    starts: np.ndarray = field(compare=False, repr=False, default=None)
    stops: np.ndarray = field(compare=False, repr=False, default=None)

    def recording(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if self.name == "recording":
            return ids
        return np.searchsorted(self.first, ids, side="right") - 1

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, np.int64)
        zeros = np.zeros(len(ids), np.int64)
        if self.name == "recording":
            return {"recording": ids, "segment": zeros - 1, "start_frame": zeros,
                    "stop_frame": self.stops[ids]}
        recording = self.recording(ids)
        return {"recording": recording, "segment": ids - self.first[recording],
                "start_frame": self.starts[ids], "stop_frame": self.stops[ids]}

    def describe(self, sample_id: int) -> str:
        """"segment s of recording r, " for a segment ("" for a recording: its row says it)."""
        if self.name == "recording":
            return ""
        recording = int(self.recording([sample_id])[0])
        return f"segment {sample_id - int(self.first[recording])} of recording {recording}, "


def sample_unit(dataset, unit: str = "recording", meta_field: str = "meta") -> SampleUnit:
    """The SampleUnit of an audio dataset (columns sample_rate, num_frames; segments in the
    JSON field `meta_field`). Invalid segments raise, naming recording and segment.

    Args:
        dataset: an open `chute.readers.Dataset`.
        unit: "recording" or "segment".
        meta_field: the JSON field whose "segments" list [{"start", "end"}, ...] in seconds.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    missing = [c for c in ("num_frames", "sample_rate") if c not in dataset.fields]
    if missing:
        raise ValueError(f"dataset {dataset.path} has no {missing} column(s); audio units need "
                         "them (`chute convert audio` stores them)")
    frames = np.asarray(dataset.column("num_frames"), np.int64)
    fingerprint = getattr(dataset, "fingerprint", "")
    if unit == "recording":
        return SampleUnit("recording", len(frames), fingerprint, stops=frames)
    rates = np.asarray(dataset.column("sample_rate"), np.int64)
    metas = dataset.read(meta_field, np.arange(len(dataset)))
    counts = np.zeros(len(frames) + 1, np.int64)
    starts, stops = [], []
    for r, meta in enumerate(metas):
        segments = (meta or {}).get("segments") or []
        for s, seg in enumerate(segments):
            first, stop = _frames(dataset, meta, r, s, seg, int(rates[r]), int(frames[r]))
            starts.append(first)
            stops.append(stop)
        counts[r + 1] = len(segments)
    return SampleUnit("segment", len(starts), fingerprint, np.cumsum(counts),
                      np.asarray(starts, np.int64), np.asarray(stops, np.int64))


def _frames(dataset, meta, r: int, s: int, seg, rate: int, frames: int) -> tuple[int, int]:
    from chute.readers._audio_sources import check_segments

    problem = check_segments([seg], rate, frames)[0]
    if problem is not None:
        raise FormatError(
            f"recording {r} ({meta.get('key')!r}) of {dataset.path}, segment {s}: {problem}. "
            "Fix the segment list with `chute meta update`.")
    return round(float(seg["start"]) * rate), round(float(seg["end"]) * rate)


def sample_durations(dataset, unit: SampleUnit | None) -> np.ndarray:
    """Seconds of audio of every sample (float64 [n]): what duration batching packs.

    Args:
        dataset: the open dataset (its `duration` and `sample_rate` columns).
        unit: the Pipeline's unit, or None (one sample per row).
    """
    if unit is None or unit.name == "recording":
        return np.asarray(dataset.column("duration"), np.float64)
    rates = np.asarray(dataset.column("sample_rate"), np.float64)
    recording = np.repeat(np.arange(len(unit.first) - 1), np.diff(unit.first))
    return (unit.stops - unit.starts) / rates[recording]


class ByRecording:
    """A producer seen through a segment unit: it reads, for each sample, its recording's row
    (a segment's transcript metadata, sample rate, ...), while the request keeps its sample ids
    so substitution and `index` stay per segment."""

    def __init__(self, producer):
        self.inner = producer
        self.name = producer.name
        self.field = producer.field

    @staticmethod
    def _rows(request):
        return replace(request, ids=np.asarray(request.params["recording"], np.int64))

    def outputs(self) -> dict[str, Output]:
        return self.inner.outputs()

    def param_sources(self) -> tuple:
        return self.inner.param_sources()

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return self.inner.shapes(self._rows(request))

    def open_epoch(self, plan, first_iteration: int):
        return _ByRecordingEpoch(self.inner.open_epoch(plan, first_iteration))

    def fill(self, request, out: dict) -> np.ndarray:
        return self.inner.fill(self._rows(request), out)

    def close(self) -> None:
        self.inner.close()


class _ByRecordingEpoch:
    def __init__(self, epoch):
        self.epoch = epoch

    def read(self, request, out: dict) -> np.ndarray:
        return self.epoch.read(ByRecording._rows(request), out)

    def close(self) -> None:
        self.epoch.close()

