"""BucketPlan: the plan of a bucketed epoch (docs/design.md, "Buckets"). Like BatchPlan it is a
frozen, picklable value whose `request(iteration)` is a pure function; its batches follow the
epoch's bucket schedule, so every rank's step k comes from the same bucket, and each request
carries the bucket's clip parameters (frame count, output size, clip starts)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chute.pipelines._buckets import BucketTable, schedule
from chute.pipelines._clips import ClipParams
from chute.pipelines._request import BatchRequest

__all__ = ["BucketPlan"]


@dataclass(frozen=True)
class BucketPlan:
    """Steps of rank `rank` of `world_size` in epoch `epoch`, from global step
    `start_position` (the resume state counts steps; `n` marks a finished epoch)."""

    dataset: object
    n: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    drop_last: bool
    start_position: int
    table: BucketTable
    mode: str = "train"
    heights: np.ndarray = field(compare=False, repr=False, default=None)
    widths: np.ndarray = field(compare=False, repr=False, default=None)
    frames: np.ndarray = field(compare=False, repr=False, default=None)
    params: tuple = ()

    @property
    def batch_size(self) -> int:
        return self.table.max_batch_size

    def _schedule(self):
        return schedule(self.table, self.seed, self.epoch, self.world_size, self.drop_last,
                        getattr(self.dataset, "fingerprint", ""), self.heights, self.widths,
                        self.frames)

    def _steps(self) -> np.ndarray:
        """Global step numbers this rank takes part in, from start_position."""
        sched = self._schedule()
        counts = sched.steps[:, 2] if len(sched.steps) else np.empty(0, np.int64)
        mine = np.flatnonzero(counts > self.rank)  # a short final step may skip ranks
        return mine[mine >= self.start_position]

    def __len__(self) -> int:
        return len(self._steps())

    def _ids(self, step: int) -> tuple[np.ndarray, int]:
        sched = self._schedule()
        bucket, offset, count = (int(v) for v in sched.steps[step])
        members = sched.order[bucket][offset:offset + count]
        return np.ascontiguousarray(members[self.rank::self.world_size], np.int64), bucket

    def request(self, iteration: int) -> BatchRequest:
        steps = self._steps()
        if iteration >= len(steps):
            raise StopIteration(f"iteration {iteration} is past the end ({len(steps)} steps)")
        ids, bucket = self._ids(int(steps[iteration]))
        return BatchRequest(iteration, ids, self._params(ids, bucket))

    def request_for(self, ids: np.ndarray, like: BatchRequest | None = None) -> BatchRequest:
        """Samples `ids` with the clip shape of the batch `like` (a substitute must fill a row
        of that batch), else of the first bucket."""
        ids = np.asarray(ids, dtype=np.int64)
        bucket = int(like.params["bucket"][0]) if like is not None and len(like.ids) else 0
        return BatchRequest(-1, ids, self._params(ids, bucket))

    def _params(self, ids: np.ndarray, bucket: int) -> dict[str, np.ndarray]:
        b = self.table.buckets[bucket]
        params: dict[str, np.ndarray] = {}
        for source in self.params:
            params.update(source(self.seed, self.epoch, ids))
        clips = ClipParams(b.num_frames, self.table.frame_interval, self.mode, self.frames)
        params.update(clips(self.seed, self.epoch, ids))
        n = len(ids)
        params["bucket"] = np.full(n, bucket, np.int64)
        params["clip_frames"] = np.full(n, b.num_frames, np.int64)
        params["clip_size"] = np.tile(np.asarray(b.size, np.int64), (n, 1))
        return params

    def position_after(self, batches_done: int) -> int:
        """Resume position (global steps done) once this rank delivered `batches_done` steps."""
        steps = self._steps()
        if batches_done >= len(steps):
            return self.n
        return int(steps[batches_done])
