"""BatchPlan: which samples, with which per-sample parameters, make up batch `iteration` of one
rank in one epoch.

A plan is a frozen, picklable value and `plan.request(iteration)` is a pure function of it: the
DALI external source, the prefetch thread, a worker process or a test all get the same request.
The plan does no I/O: the columns its parameter sources need were read when it was made, and the
dataset is named by its identity (`DatasetRef`: storage URL + fingerprint) for processes that
must reopen it (docs/design.md, "Plans and producers").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.pipelines._common._request import BatchRequest, ParamSource
from chute.pipelines.sampling._order import EpochOrder
from chute.pipelines.sampling._partition import Partition

__all__ = ["BatchPlan"]

_ORDER_BLOCK = 16  # batches whose order is evaluated together (see BatchPlan.ids)


@dataclass(frozen=True)
class BatchPlan:
    """Batches of rank `rank` of `world_size` for epoch `epoch`, from global `start_position`.

    Attributes:
        dataset: a `chute.readers.DatasetRef` (url, fingerprint) of the dataset.
        n: samples in the dataset.
        params: parameter sources evaluated for every batch (e.g. `CropParams`).
        shuffle: False: position i is sample i (the dataset's own order).
        sampler: the source's own epoch order (`order(seed, epoch, shuffle)`: positions ->
            sample ids, and `rows`: the sample ids' bound), as a `chute.mix` has; None: the
            keyed permutation of [0, n).
    """

    dataset: object
    n: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool
    start_position: int
    params: tuple[ParamSource, ...] = ()
    shuffle: bool = True
    sampler: Any = None

    @property
    def partition(self) -> Partition:
        return Partition(
            self.n, self.start_position, self.rank, self.world_size, self.batch_size,
            self.drop_last,
        )

    @property
    def order(self):
        """Position -> sample id: the epoch's keyed bijection, or the identity unshuffled (or
        the sampler's order)."""
        if self.sampler is not None:
            return self.sampler.order(self.seed, self.epoch, self.shuffle)
        if not self.shuffle:
            return _identity
        return EpochOrder(self.n, self.seed, self.epoch)

    def __len__(self) -> int:
        return self.partition.batches

    @property
    def id_count(self) -> int:
        """Sample ids lie in [0, id_count): `n`, unless a sampler draws them from more rows."""
        return self.n if self.sampler is None else int(self.sampler.rows)

    def positions(self, iteration: int) -> np.ndarray:
        """Global positions of batch `iteration` (raises StopIteration past the end)."""
        if iteration >= len(self):
            raise StopIteration(f"iteration {iteration} is past the end ({len(self)} batches)")
        return self.partition.batch_positions(iteration)

    def ids(self, iteration: int) -> np.ndarray:
        """Global sample ids (int64) of batch `iteration`. The order is evaluated for
        `_ORDER_BLOCK` batches at once and kept: one evaluation costs about the same for 64
        positions as for 1,024 (fixed NumPy overhead per Feistel round), so batch by batch it
        was ~0.2 ms of every batch's serial work."""
        self.positions(iteration)  # StopIteration past the end
        block = iteration // _ORDER_BLOCK
        cached = getattr(self, "_order_block", None)
        if cached is None or cached[0] != block:
            first = block * _ORDER_BLOCK
            spans = [self.positions(i) for i in range(first, min(first + _ORDER_BLOCK,
                                                                 len(self)))]
            starts = np.cumsum([0] + [len(s) for s in spans])
            cached = (block, starts, self.order(np.concatenate(spans)))
            object.__setattr__(self, "_order_block", cached)  # a cache, not part of the value
        _, starts, ids = cached
        k = iteration - block * _ORDER_BLOCK
        return ids[starts[k]:starts[k + 1]].copy()

    def request(self, iteration: int) -> BatchRequest:
        """The request of batch `iteration` (StopIteration past the end)."""
        ids = self.ids(iteration)
        return BatchRequest(iteration, ids, self.params_of(ids))

    def request_for(self, ids: np.ndarray, like: BatchRequest | None = None) -> BatchRequest:
        """A request for arbitrary samples of this epoch, with the parameters they get
        anywhere in it (what a substitute for a failed sample uses; `like`, the failed
        batch's request, matters only to plans whose batches differ in shape)."""
        ids = np.asarray(ids, dtype=np.int64)
        return BatchRequest(-1, ids, self.params_of(ids))

    def params_of(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = {}
        for source in self.params:
            params.update(source(self.seed, self.epoch, ids))
        return params

    def position_after(self, batches_done: int) -> int:
        """Global resume position once every rank has delivered `batches_done` batches."""
        return self.partition.position_after(batches_done)

    def state_after(self, batches_done: int) -> dict:
        """The batching's own resume state then: none beyond the position."""
        return {}


def _identity(positions: np.ndarray) -> np.ndarray:
    return np.asarray(positions, np.int64)
