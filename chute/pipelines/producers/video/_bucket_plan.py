"""BucketPlan: the plan of a bucketed epoch (docs/design.md, "Buckets"). Like BatchPlan it is a
frozen, picklable value whose `request(iteration)` is a pure function; its batches follow the
epoch's bucket schedule, so every rank's step k comes from the same bucket, and each request
carries the bucket's clip parameters (frame count, output size, clip starts)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chute.pipelines._common._request import BatchRequest
from chute.pipelines.producers.video._buckets import BucketTable, schedule
from chute.pipelines.producers.video._clips import ClipParams

__all__ = ["BucketPlan", "state_offsets"]


@dataclass(frozen=True)
class BucketPlan:
    """Steps of rank `rank` of `world_size` in epoch `epoch` after a resume point:
    `start_offsets[b]` samples of bucket b already delivered (() = the epoch's start) and
    `start_position` their sum (samples delivered by all ranks, as BatchPlan counts; `n` marks
    a finished epoch)."""

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
    heights: np.ndarray | None = field(compare=False, repr=False, default=None)
    widths: np.ndarray | None = field(compare=False, repr=False, default=None)
    frames: np.ndarray | None = field(compare=False, repr=False, default=None)
    params: tuple = ()
    start_offsets: tuple = ()

    @property
    def batch_size(self) -> int:
        return self.table.max_batch_size

    def _schedule(self):
        return schedule(self.table, self.seed, self.epoch, self.world_size, self.drop_last,
                        "" if self.dataset is None else self.dataset.fingerprint,
                        self.heights, self.widths,
                        self.frames, self.start_offsets)

    def _steps(self) -> np.ndarray:
        """Global step numbers (of the schedule after the resume point) this rank takes."""
        sched = self._schedule()
        counts = sched.steps[:, 2] if len(sched.steps) else np.empty(0, np.int64)
        return np.flatnonzero(counts > self.rank)  # a short final step may skip ranks

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
        assert self.frames is not None  # the dataset's num_frames column (Buckets.plan)
        clips = ClipParams(b.num_frames, self.table.frame_interval, self.mode, self.frames,
                           self.table.spread)
        params.update(clips(self.seed, self.epoch, ids))
        n = len(ids)
        params["bucket"] = np.full(n, bucket, np.int64)
        params["clip_frames"] = np.full(n, b.num_frames, np.int64)
        params["clip_size"] = np.tile(np.asarray(b.size, np.int64), (n, 1))
        return params

    def offsets_after(self, batches_done: int) -> tuple[int, ...]:
        """Samples of each bucket delivered by all ranks once this rank delivered
        `batches_done` steps (the resume state; steps run in lockstep on every rank)."""
        sched = self._schedule()
        done = np.zeros(len(self.table.buckets), np.int64)
        if self.start_offsets:
            done += np.asarray(self.start_offsets, np.int64)
        steps = self._steps()
        upto = int(steps[batches_done]) if batches_done < len(steps) else len(sched.steps)
        np.add.at(done, sched.steps[:upto, 0], sched.steps[:upto, 2])
        return tuple(done.tolist())

    def state_after(self, batches_done: int) -> dict:
        """The resume state beyond the position: what each bucket delivered (so a resume with
        any world size continues every bucket where it stopped)."""
        if batches_done >= len(self._steps()):
            return {}
        return {"bucket_offsets": list(self.offsets_after(batches_done))}

    def position_after(self, batches_done: int) -> int:
        """Samples delivered by all ranks once this rank delivered `batches_done` steps; `n`
        once it delivered all of them."""
        if batches_done >= len(self._steps()):
            return self.n
        return int(sum(self.offsets_after(batches_done)))


def state_offsets(state: dict, position: int, n: int, table: BucketTable | None,
                  where: str) -> tuple[int, ...]:
    """The per-bucket delivered counts ("bucket_offsets") of a resume state, checked.

    Args:
        state: a `Pipeline.state_dict()`.
        position: its checked position (samples delivered by all ranks).
        n: the dataset's samples (a position of n is a finished epoch).
        table: the Pipeline's buckets, or None.
        where: who is loading, for error messages.
    """
    offsets = state.get("bucket_offsets")
    if table is None:
        if offsets:
            raise ValueError(f"{where}: the state was saved by a Pipeline with buckets "
                             "(batching=Buckets(...)); load it into one with the same buckets")
        return ()
    if offsets is None:
        if 0 < position < n:
            raise ValueError(f"{where}: this Pipeline has batching=Buckets(...) but the state "
                             f"(position {position}) has no bucket_offsets; load a state saved "
                             "by a Pipeline with the same buckets")
        return ()
    try:
        offsets = tuple(int(c) for c in offsets)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: bucket_offsets must be a list of integers, got "
                         f"{offsets!r:.200}") from None
    if offsets and (len(offsets) != len(table.buckets) or min(offsets) < 0
                    or (sum(offsets) != position and position < n)):
        raise ValueError(f"{where}: bucket_offsets {list(offsets)!r:.200} do not fit "
                         f"{len(table.buckets)} buckets and position {position}; load a "
                         "state saved with the same Buckets config")
    return offsets
