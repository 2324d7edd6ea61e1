"""BatchPlan: which samples and crops make up batch `iteration` of one rank in one epoch.

A plan is a frozen, picklable value. `plan.batch(iteration)` is a pure function of the plan's
fields and the iteration: the DALI external source, the CPU prefetch thread, a worker process
or a test can all call it and get the same (ids, boxes, flips).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chute.pipelines._crops import CropConfig, crop_boxes
from chute.pipelines._order import EpochOrder
from chute.pipelines._partition import Partition

__all__ = ["BatchPlan"]


@dataclass(frozen=True)
class BatchPlan:
    """Batches of rank `rank` of `world_size` for epoch `epoch`, from global `start_position`."""

    dataset_path: str
    n: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool
    start_position: int
    crop: CropConfig

    @property
    def partition(self) -> Partition:
        return Partition(
            self.n, self.start_position, self.rank, self.world_size, self.batch_size,
            self.drop_last,
        )

    @property
    def order(self) -> EpochOrder:
        return EpochOrder(self.n, self.seed, self.epoch)

    def __len__(self) -> int:
        return self.partition.batches

    def positions(self, iteration: int) -> np.ndarray:
        """Global positions of batch `iteration` (raises StopIteration past the end)."""
        if iteration >= len(self):
            raise StopIteration(f"iteration {iteration} is past the end ({len(self)} batches)")
        return self.partition.batch_positions(iteration)

    def ids(self, iteration: int) -> np.ndarray:
        """Global sample ids (int64) of batch `iteration`."""
        return self.order(self.positions(iteration))

    def batch(self, iteration: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids int64 [B], boxes int32 [B, 4], flips bool [B]) of batch `iteration`."""
        ids = self.ids(iteration)
        heights, widths = self.sizes()
        boxes, flips = self.crops(ids, heights[ids], widths[ids])
        return ids, boxes, flips

    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """The dataset's full image heights and widths (global columns, cached per process)."""
        return _image_sizes(self.dataset_path)

    def crops(self, ids, heights, widths) -> tuple[np.ndarray, np.ndarray]:
        """Crop boxes and flips of samples `ids` in this plan's epoch."""
        return crop_boxes(self.seed, self.epoch, ids, heights, widths, self.crop)

    def position_after(self, batches_done: int) -> int:
        """Global resume position once every rank has delivered `batches_done` batches."""
        return self.partition.position_after(batches_done)


def _image_sizes(path: str) -> tuple[np.ndarray, np.ndarray]:
    manifest = Path(path) / "chute.json"
    try:
        stamp = manifest.stat().st_mtime_ns
    except FileNotFoundError:  # no manifest (a Megatron pair)
        stamp = 0
    return _sizes_cached(str(path), stamp)


@functools.lru_cache(maxsize=8)
def _sizes_cached(path: str, stamp: int) -> tuple[np.ndarray, np.ndarray]:
    # One open per process and dataset version; the columns are memory-mapped, so this is cheap.
    from chute.readers import open_dataset

    ds = open_dataset(path)
    return np.asarray(ds.column("height")), np.asarray(ds.column("width"))
