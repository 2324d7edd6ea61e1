"""DurationPlan: batches of at most `max_duration` seconds of audio instead of a fixed size
(docs/design.md, "Audio").

The epoch's order (the same keyed bijection as BatchPlan's) is cut into windows of `window`
samples; each window is sorted by duration and packed greedily into batches that stay within
`max_duration` seconds and `batch_size` samples (similar durations together: little padding),
and the batches of a window are shuffled by (seed, epoch). Global batch g goes to rank
g mod world_size. The whole batch list is a pure function of (seed, epoch) -- not of the world
size -- so a resume position (samples delivered by all ranks, always at a round boundary)
continues exactly, also with another world size. It is a BatchPlan, so the Pipeline runs it
unchanged.

The last round may hold fewer batches than ranks. With drop_last (train) it is dropped: every
rank gets the same number of batches. Without it (eval) every sample is delivered exactly once:
the last round's batches are split (halves of the largest, each still within both limits) into
one batch per rank where it has that many samples, so ranks get equal steps unless the last
round holds fewer samples than ranks (then ranks r >= its samples have one batch fewer, as with
fixed batches: chute/pipelines/sampling/_partition.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from chute.pipelines.sampling._order import EpochOrder
from chute.pipelines.sampling._plan import BatchPlan

__all__ = ["DurationPlan", "pack_batches", "spread_batches"]


def pack_batches(ids: np.ndarray, durations: np.ndarray, max_duration: float,
                 max_batch: int, *, sort: bool = True) -> list[np.ndarray]:
    """`ids` sorted by duration, packed greedily into batches within both limits.

    Args:
        ids: sample ids (int64).
        durations: seconds of each of `ids`.
        max_duration: most seconds of audio in one batch.
        max_batch: most samples in one batch.
        sort: pack by duration (False: in the order given).
    """
    order = np.argsort(durations, kind="stable") if sort else np.arange(len(ids))
    batches: list[np.ndarray] = []
    current: list[int] = []
    total = 0.0
    for k in order.tolist():
        d = float(durations[k])
        if current and (total + d > max_duration or len(current) == max_batch):
            batches.append(np.asarray(current, np.int64))
            current, total = [], 0.0
        current.append(int(ids[k]))
        total += d
    if current:
        batches.append(np.asarray(current, np.int64))
    return batches


def spread_batches(batches: list[np.ndarray], parts: int) -> list[np.ndarray]:
    """`batches` split until there are `parts` of them (or one per sample, when they hold
    fewer): the largest is halved each time, so every piece stays within the limits its batch
    kept. Deterministic; the samples and their order across the pieces are unchanged.

    Args:
        batches: the batches (int64 id arrays) of an incomplete last round.
        parts: how many batches are wanted (the world size).
    """
    pieces = [np.asarray(b, np.int64) for b in batches if len(b)]
    target = min(parts, sum(len(b) for b in pieces))
    while len(pieces) < target:
        k = max(range(len(pieces)), key=lambda i: len(pieces[i]))  # the first largest
        half = (len(pieces[k]) + 1) // 2
        pieces[k:k + 1] = [pieces[k][:half], pieces[k][half:]]
    return pieces


@dataclass(frozen=True)
class DurationPlan(BatchPlan):
    """Batches of rank `rank` for epoch `epoch` within `max_duration` seconds each; a BatchPlan
    whose `batch_size` is the most samples in one batch (the Pipeline's slot size). With
    `drop_last` an incomplete last round is dropped (equal steps on every rank); without it
    every sample is delivered once (see the module docstring). `request`, `request_for` and
    `params_of` are BatchPlan's.

    Attributes:
        max_duration: seconds of audio per batch, at most.
        durations: seconds of every sample (float64 [n]).
        window: samples sorted and packed together (larger: less padding, less randomness).
    """

    max_duration: float = 0.0
    durations: np.ndarray | None = field(compare=False, repr=False, default=None)
    window: int = 2048

    def __post_init__(self) -> None:
        too_long = np.flatnonzero(self._seconds > self.max_duration)
        if too_long.size:
            raise ValueError(
                f"{too_long.size} samples are longer than max_duration={self.max_duration} s "
                f"(e.g. sample {int(too_long[0])}: {float(self._seconds[too_long[0]]):.3f} s); "
                "raise MaxDuration's seconds or drop them from the segment lists")

    @property
    def _seconds(self) -> np.ndarray:
        """`durations`, which every DurationPlan is given (its None default only lets the
        field follow BatchPlan's fields, which have defaults)."""
        assert self.durations is not None, "DurationPlan needs durations"
        return self.durations

    @cached_property
    def _batches(self) -> list[np.ndarray]:
        if not self.shuffle:  # the dataset's order, packed as it comes
            return pack_batches(np.arange(self.n, dtype=np.int64), self._seconds,
                                self.max_duration, self.batch_size, sort=False)
        order = EpochOrder(self.n, self.seed, self.epoch)(np.arange(self.n, dtype=np.int64))
        order = np.asarray(order, np.int64)
        rng = np.random.default_rng([self.seed, self.epoch, 0x6475])
        batches: list[np.ndarray] = []
        for lo in range(0, self.n, self.window):
            ids = order[lo:lo + self.window]
            packed = pack_batches(ids, self._seconds[ids], self.max_duration, self.batch_size)
            batches.extend(packed[i] for i in rng.permutation(len(packed)))
        return batches

    @cached_property
    def _ends(self) -> np.ndarray:
        """Samples delivered once global batches [0, g) are: int64 [batches + 1]."""
        ends = np.zeros(len(self._batches) + 1, np.int64)
        np.cumsum([len(b) for b in self._batches], out=ends[1:])
        return ends

    @cached_property
    def _first(self) -> int:
        """The global batch the plan starts at (start_position must be a batch boundary)."""
        if self.start_position >= self.n:
            return len(self._batches)
        g = int(np.searchsorted(self._ends, self.start_position))
        if self._ends[g] != self.start_position:
            raise ValueError(f"position {self.start_position} is not a batch boundary of epoch "
                             f"{self.epoch}; was the state saved with another MaxDuration?")
        return g

    @property
    def _rounds(self) -> int:
        """Complete rounds (one batch per rank) from the start."""
        return (len(self._batches) - self._first) // self.world_size

    @cached_property
    def _tail(self) -> list[np.ndarray]:
        """The incomplete last round spread over the ranks ([] with drop_last)."""
        if self.drop_last:
            return []
        return spread_batches(self._batches[self._first + self._rounds * self.world_size:],
                              self.world_size)

    def __len__(self) -> int:
        return self._rounds + (1 if self.rank < len(self._tail) else 0)

    def ids(self, iteration: int) -> np.ndarray:
        if iteration >= len(self):
            raise StopIteration(f"iteration {iteration} is past the end ({len(self)} batches)")
        if iteration == self._rounds:
            return self._tail[self.rank]
        return self._batches[self._first + iteration * self.world_size + self.rank]

    def position_after(self, batches_done: int) -> int:
        if batches_done > self._rounds:  # the spread last round: the epoch is delivered
            return self.n
        return int(self._ends[self._first + batches_done * self.world_size])
