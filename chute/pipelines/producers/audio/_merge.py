"""Dynamic segment merging: adjacent segments of one recording joined into samples of a target
duration range, drawn again every epoch (docs/design.md, "Audio").

Segments are numbered recording by recording, in each recording's list order. Segment i+1 may
join segment i's sample when both belong to the same recording and i+1 is not earlier in time
(its start and its end are not before i's): such a chain is a *run*, and a sample made of
segments first..last of a run spans [start of first, end of last], which covers every segment
in it. Every segment i draws a target duration T_i uniform in [min_s, max_s], keyed by (seed,
epoch, i). A sample that begins at segment i ends at the first segment whose end reaches
start_i + T_i -- or earlier, at the last one whose end stays within start_i + max_s -- and never
before i itself (so a segment longer than max_s stays a sample of its own). Both searches run
for all segments at once: one `searchsorted` each over the runs' ends laid end to end on one
axis. The samples of an epoch are then the chains of "next sample starts here" pointers from
each run's first segment, advanced for all runs together (one vectorised step per sample of the
longest run). An epoch's samples are kept as prefix sums `bounds` (sample k = segments
[bounds[k], bounds[k+1])), so addressing a sample is O(1).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform

__all__ = ["SegmentMerge", "MergeTable", "check_merge"]


@dataclass(frozen=True)
class SegmentMerge:
    """The target duration range of merged samples, in seconds.

    Attributes:
        min_s: a merged sample aims at no less than this (a run's last sample, or a segment
            whose neighbour would push it past max_s, can be shorter).
        max_s: a merged sample never spans more than this, unless a single segment does.
    """

    min_s: float
    max_s: float


def check_merge(merge, unit: str | None) -> SegmentMerge | None:
    """`merge=` of a Pipeline as a SegmentMerge (None stays None); bad values raise naming them.

    Args:
        merge: (min_s, max_s) seconds, or None.
        unit: the Pipeline's unit (merging needs "segment").
    """
    if merge is None:
        return None
    if unit != "segment":
        raise ValueError(f"merge={merge!r} joins segments of a recording: it needs "
                         f"unit='segment' (got unit={unit!r})")
    try:
        min_s, max_s = (float(v) for v in merge)
    except (TypeError, ValueError):
        raise ValueError(f"merge must be (min_s, max_s) in seconds, got {merge!r}") from None
    if not (math.isfinite(min_s) and math.isfinite(max_s)) or min_s < 0 or max_s <= 0:
        raise ValueError(f"merge=(min_s, max_s) must be finite seconds with min_s >= 0 and "
                         f"max_s > 0, got {merge!r}")
    if min_s > max_s:
        raise ValueError(f"merge=(min_s, max_s) has min_s {min_s} > max_s {max_s}; swap them")
    return SegmentMerge(min_s, max_s)


class MergeTable:
    """The epoch-independent part of merging (runs, shifted ends, how far each segment can
    reach within max_s) and the merged samples of each (seed, epoch), cached.

    Args:
        starts, stops: int64 [N] frames of every segment (at its recording's rate).
        recording: int64 [N] the recording of every segment.
        rates: float64 [N] frames per second of every segment's recording.
        merge: the target range.
    """

    def __init__(self, starts, stops, recording, rates, merge: SegmentMerge):
        self.merge = merge
        self.starts = np.asarray(starts, np.int64)
        self.stops = np.asarray(stops, np.int64)
        self.rates = np.asarray(rates, np.float64)
        n = self.n = len(self.starts)
        joins = ((recording[1:] == recording[:-1]) & (self.starts[1:] >= self.starts[:-1])
                 & (self.stops[1:] >= self.stops[:-1]))
        begins = np.concatenate([[True], ~joins]) if n else np.zeros(0, bool)
        self.run_first = np.flatnonzero(begins)
        self.run_end = np.append(self.run_first[1:], n).astype(np.int64)  # exclusive
        run = np.cumsum(begins) - 1
        # runs laid end to end: keys[i] = stop_i - (its run's first start) + (extents before)
        origin = self.starts[self.run_first]
        extent = self.stops[self.run_end - 1] - origin + 1  # a run's last stop is its largest
        shift = (np.concatenate([[0], np.cumsum(extent)[:-1]]) - origin)[run] if n else run
        self.keys = (self.stops + shift).astype(np.float64)
        self.origin = (self.starts + shift).astype(np.float64)  # start_i on the same axis
        last = self.run_end[run] - 1
        reach = np.searchsorted(self.keys, self.origin + np.floor(merge.max_s * self.rates),
                                side="right") - 1
        self.reach = np.clip(reach, np.arange(n), last)  # last segment within max_s of i
        self._cache: dict[tuple[int, int], np.ndarray] = {}
        self._lock = threading.Lock()

    def bounds(self, seed: int, epoch: int) -> np.ndarray:
        """int64 [M + 1]: merged sample k of epoch `epoch` is segments [b[k], b[k + 1])."""
        key = (int(seed), int(epoch))
        found = self._cache.get(key)
        if found is None:
            found = self._bounds(*key)
            with self._lock:
                if len(self._cache) >= 4:  # the current epoch and a resumed or next one
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = found
        return found

    def _bounds(self, seed: int, epoch: int) -> np.ndarray:
        n, merge = self.n, self.merge
        u = uniform(derive_key(seed, epoch, "merge"), np.arange(n, dtype=np.int64))
        target = self.origin + (merge.min_s + u * (merge.max_s - merge.min_s)) * self.rates
        reached = np.searchsorted(self.keys, target, side="left")
        last = np.maximum(np.minimum(reached, self.reach), np.arange(n))  # never before i
        following = last + 1  # where the next sample begins
        starts_here = np.zeros(n, bool)
        current, ends = self.run_first, self.run_end
        while current.size:  # every run's chain advanced one sample per step
            starts_here[current] = True
            current = following[current]
            alive = current < ends
            current, ends = current[alive], ends[alive]
        return np.append(np.flatnonzero(starts_here), n).astype(np.int64)
