"""Which positions of the global order each rank reads, from a global start position.

Rank r of W takes positions start + r, start + r + W, start + r + 2W, ... of the epoch's order,
and its batch t holds its samples t*B ... t*B + B - 1. So batch t of every rank together covers
the contiguous global positions [start + t*B*W, start + (t+1)*B*W): after k batches on every
rank exactly the positions [start, start + k*B*W) are delivered, which is what the resume
position counts. Resuming at position p with another world size just re-partitions [p, N).

Batch counts (R = N - start remaining positions):
- drop_last=True (training): every rank gets floor(R / (B*W)) full batches; the last
  R mod (B*W) positions of the epoch are not delivered (they come first in some later epoch,
  whose order is different).
- drop_last=False (evaluation): every remaining position is delivered exactly once. Rank r gets
  ceil((R - r) / W) samples in ceil(that / B) batches; only the last batch may be short. All ranks
  get the same number of batches, except when the final round holds fewer than W samples
  (0 < R mod (B*W) < W): then ranks r >= R mod (B*W) have one batch fewer, because giving them
  a batch would need either an empty batch or a duplicate sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Partition"]


@dataclass(frozen=True)
class Partition:
    n: int
    start: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"need 0 <= rank < world_size, got {self.rank}, {self.world_size}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0 <= self.start <= self.n:
            raise ValueError(f"start position must lie in [0, {self.n}], got {self.start}")

    @property
    def remaining(self) -> int:
        return self.n - self.start

    @property
    def samples(self) -> int:
        """Samples this rank delivers from `start` to the end of the epoch."""
        if self.drop_last:
            return self.batches * self.batch_size
        return max(0, -(-(self.remaining - self.rank) // self.world_size))

    @property
    def batches(self) -> int:
        if self.drop_last:
            return self.remaining // (self.batch_size * self.world_size)
        return -(-self.samples // self.batch_size)

    def batch_positions(self, iteration: int) -> np.ndarray:
        """Global positions (int64) of this rank's batch `iteration`."""
        if not 0 <= iteration < self.batches:
            raise IndexError(f"iteration {iteration} out of range [0, {self.batches})")
        first = iteration * self.batch_size
        count = min(self.batch_size, self.samples - first)
        local = np.arange(first, first + count, dtype=np.int64)
        return self.start + self.rank + local * self.world_size

    def position_after(self, batches_done: int) -> int:
        """Global resume position once every rank has delivered `batches_done` batches."""
        return min(self.start + batches_done * self.batch_size * self.world_size, self.n)
