"""Sample units: what a plan's sample id addresses (docs/design.md, "Audio").

With `unit="recording"` sample k is row k of the dataset. With `unit="segment"` sample k is
one timestamped segment of one recording: the segments listed in each recording's metadata are
numbered recording by recording, and a prefix sum over the per-recording counts maps k to its
recording in O(log R) with no per-segment copy of any audio. With `merge=(min_s, max_s)`,
sample k of an epoch is a run of adjacent segments (`_merge.py` beside this one), addressed
through that epoch's prefix sums the same way. Order, partition, resume and
substitution work on sample ids unchanged; a `SampleUnit` is the ParamSource that turns them
into ("recording", "segment", "last_segment", "start_frame", "stop_frame"), and
`ByRow` lets a producer of a stored field read the recording row of each sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chute.errors import FormatError
from chute.pipelines.producers._by_row import ByRow
from chute.pipelines.producers.audio._merge import MergeTable, SegmentMerge

__all__ = ["UNITS", "SampleUnit", "sample_unit"]

UNITS = ("recording", "segment")


@dataclass(frozen=True)
class SampleUnit:
    """ParamSource: sample ids -> "recording" (dataset row), "segment" and "last_segment" (the
    first and last index in the recording's segment list the sample covers; -1 for a whole
    recording), "start_frame" and "stop_frame" (the frames of that recording the sample
    covers, at the recording's own rate).

    With `merge`, the samples of an epoch are merged runs of adjacent segments
    (chute/pipelines/producers/audio/_merge.py), so their number depends on (seed, epoch): `count`.

    Attributes:
        name: "recording" or "segment".
        n: number of recordings or segments (before merging).
        merge: the target duration range of merged samples, or None.
        first: int64 [R+1]: index of each recording's first segment (prefix sums).
        starts, stops: int64 [n] frames of each segment; for unit "recording", stops holds the
            recordings' frame counts and starts is empty.
        table: the MergeTable (with merge).
    """

    name: str
    n: int
    fingerprint: str = ""
    merge: SegmentMerge | None = None
    first: np.ndarray | None = field(compare=False, repr=False, default=None)
    starts: np.ndarray | None = field(compare=False, repr=False, default=None)
    stops: np.ndarray | None = field(compare=False, repr=False, default=None)
    table: MergeTable | None = field(compare=False, repr=False, default=None)

    def count(self, seed: int, epoch: int) -> int:
        """Samples of epoch `epoch` (`n` unless segments are merged)."""
        return self.n if self.table is None else len(self.table.bounds(seed, epoch)) - 1

    def spans(self, seed: int, epoch: int, ids) -> tuple[np.ndarray, np.ndarray]:
        """(first, last) segment numbers (global, int64) of samples `ids` of a segment unit."""
        ids = np.asarray(ids, np.int64)
        if self.table is None:
            return ids, ids
        bounds = self.table.bounds(seed, epoch)
        return bounds[ids], bounds[ids + 1] - 1

    def recording(self, ids: np.ndarray, seed: int = 0, epoch: int = 0) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if self.name == "recording":
            return ids
        return self._recording_of(self.spans(seed, epoch, ids)[0])

    def _recording_of(self, segments: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._segment_arrays()[0], segments, side="right") - 1

    def _segment_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, starts, stops), which `sample_unit` sets for every unit "segment"."""
        assert self.first is not None and self.starts is not None and self.stops is not None
        return self.first, self.starts, self.stops

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, np.int64)
        zeros = np.zeros(len(ids), np.int64)
        if self.name == "recording":
            assert self.stops is not None  # the recordings' frame counts
            return {"recording": ids, "segment": zeros - 1, "last_segment": zeros - 1,
                    "start_frame": zeros, "stop_frame": self.stops[ids]}
        first, last = self.spans(seed, epoch, ids)
        recording = self._recording_of(first)
        offsets, starts, stops = self._segment_arrays()
        return {"recording": recording, "segment": first - offsets[recording],
                "last_segment": last - offsets[recording],
                "start_frame": starts[first], "stop_frame": stops[last]}

    def longest(self) -> dict[str, np.ndarray]:
        """"recording", "start_frame" and "stop_frame" of the longest sample that can begin at
        each segment (each recording) in any epoch: what output slots are sized for."""
        if self.name == "recording" or self.table is None:
            return self(0, 0, np.arange(self.n, dtype=np.int64))
        segments = np.arange(self.n, dtype=np.int64)
        _, starts, stops = self._segment_arrays()
        return {"recording": self._recording_of(segments), "start_frame": starts,
                "stop_frame": stops[self.table.reach]}

    def durations(self, dataset, seed: int, epoch: int) -> np.ndarray | None:
        """Seconds of audio of every sample of an epoch (float64 [n]), what duration batching
        packs; None for unit "recording" (the rows' stored `duration` column says).

        Args:
            dataset: the open dataset (its `sample_rate` column).
            seed, epoch: the epoch (merged samples differ from one to the next).
        """
        if self.name == "recording":
            return None
        rates = np.asarray(dataset.column("sample_rate"), np.float64)
        params = self(seed, epoch, np.arange(self.count(seed, epoch), dtype=np.int64))
        return (params["stop_frame"] - params["start_frame"]) / rates[params["recording"]]

    def view(self, producer):
        """The producer as a plan of this unit addresses it: segments read their recording's
        row (`producers/_by_row.ByRow`); recordings are dataset rows."""
        return ByRow(producer, "recording") if self.name == "segment" else producer

    def rows(self, ids, seed: int = 0, epoch: int = 0) -> np.ndarray:
        """The dataset row (recording) of each sample (the unit protocol's name)."""
        return self.recording(np.asarray(ids, np.int64), seed, epoch)

    def describe(self, sample_id: int, seed: int = 0, epoch: int = 0) -> str:
        """"segment s of recording r, " for a segment, "segments s-t of recording r, " for a
        merged one ("" for a recording: its row says it)."""
        if self.name == "recording":
            return ""
        first, last = (int(v[0]) for v in self.spans(seed, epoch, [sample_id]))
        recording = int(self._recording_of(np.asarray([first]))[0])
        offset = int(self._segment_arrays()[0][recording])
        s, t = first - offset, last - offset
        what = f"segment {s}" if s == t else f"segments {s}-{t}"
        return f"{what} of recording {recording}, "


def sample_unit(dataset, unit: str = "recording", meta_field: str = "meta",
                merge: SegmentMerge | None = None) -> SampleUnit:
    """The SampleUnit of an audio dataset (columns sample_rate, num_frames; segments in the
    JSON field `meta_field`). Invalid segments raise, naming recording and segment.

    Args:
        dataset: an open `chute.readers.Dataset`.
        unit: "recording" or "segment".
        meta_field: the JSON field whose "segments" list [{"start", "end"}, ...] in seconds.
        merge: merge adjacent segments to this duration range every epoch (unit "segment":
            `check_merge` has refused it for any other unit).
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    needed = ("num_frames", "sample_rate") + ((meta_field,) if unit == "segment" else ())
    missing = [c for c in needed if c not in dataset.fields]
    if missing:
        raise FormatError(f"dataset {dataset.path} has no {missing} column(s); audio units "
                          "need them (`chute convert audio` stores them)")
    frames = np.asarray(dataset.column("num_frames"), np.int64)
    fingerprint = dataset.fingerprint
    if unit == "recording":
        return SampleUnit("recording", len(frames), fingerprint, stops=frames)
    rates = np.asarray(dataset.column("sample_rate"), np.int64)
    metas = dataset.read(meta_field, np.arange(len(dataset)))
    counts = np.zeros(len(frames) + 1, np.int64)
    segment_starts: list[int] = []
    segment_stops: list[int] = []
    for r, meta in enumerate(metas):
        segments = (meta or {}).get("segments") if isinstance(meta, (dict, type(None))) else 0
        if not isinstance(segments, (list, type(None))):
            raise FormatError(f"recording {r} of {dataset.path}: its {meta_field!r} is not an "
                              "object with a 'segments' list; fix it with `chute meta update`")
        segments = segments or []
        for s, seg in enumerate(segments):
            start, stop = _frames(dataset, meta, r, s, seg, int(rates[r]), int(frames[r]))
            segment_starts.append(start)
            segment_stops.append(stop)
        counts[r + 1] = len(segments)
    first = np.cumsum(counts)
    starts = np.asarray(segment_starts, np.int64)
    stops = np.asarray(segment_stops, np.int64)
    table = None
    if merge is not None:
        recording = np.repeat(np.arange(len(frames)), counts[1:])
        table = MergeTable(starts, stops, recording, rates[recording], merge)
    return SampleUnit("segment", len(starts), fingerprint, merge, first, starts, stops, table)


def _frames(dataset, meta, r: int, s: int, seg, rate: int, frames: int) -> tuple[int, int]:
    from chute.convert import segment_frames

    found = segment_frames(seg, rate, frames)
    if isinstance(found, str):
        raise FormatError(
            f"recording {r} ({meta.get('key')!r}) of {dataset.path}, segment {s}: {found}. "
            "Fix the segment list with `chute meta update` (which drops segments a recording "
            "cannot deliver).")
    return found
