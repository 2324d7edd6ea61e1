"""A cache-friendly epoch order: shuffle the shards, then the samples within windows of a few
consecutive shards (docs/storage.md, "Reading a dataset larger than the cache").

With a global shuffle every batch reads from almost every shard, so a node cache smaller
than the dataset would fetch each shard many times per epoch. Here the epoch walks the
shards in a keyed random order, `shards` at a time, and shuffles the samples of each window
among themselves: at any moment the ranks read from one or two windows, and each shard is
fetched once per epoch.

The order is still a keyed bijection of [0, N) computed per position from (seed, epoch), so
everything the global order guarantees holds unchanged: the DDP partition (rank r takes
positions r, r + W, ...), equal steps, and exact resume from a position with any world size
(`sampling/_partition.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key
from chute.pipelines.sampling._order import EpochOrder

__all__ = ["ShardWindows", "WindowOrder"]


@dataclass(frozen=True)
class ShardWindows:
    """`Pipeline(order=ShardWindows(shards=4))`: shuffle the shards, then the samples within
    windows of `shards` consecutive shards of that order (for datasets larger than the node
    cache of an `s3://` dataset; see docs/storage.md). On a zarr group the shards are its
    chunks along the first dimension (docs/latents.md).

    Args:
        shards: shards per window (>= 1); more mixes better, fewer needs less cache.
    """

    shards: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.shards, bool) or not isinstance(self.shards, int) or self.shards < 1:
            raise ValueError(f"ShardWindows(shards=...) needs a whole number >= 1, got "
                             f"{self.shards!r}")

    def bind(self, dataset) -> BoundWindows:
        """The windows over `dataset`'s shards."""
        starts = dataset.shard_starts
        if starts is None:
            raise ValueError(f"order=ShardWindows(...) needs a chute dataset or zarr group "
                             f"(its shards or chunks); "
                             f"{dataset.path} has none: use order='shuffle'")
        return BoundWindows(tuple(int(s) for s in np.asarray(starts)), self.shards)


@dataclass(frozen=True)
class BoundWindows:
    """ShardWindows over one dataset: its shard starts (len = shards + 1). A Pipeline plans
    its epochs with it as with a source's own sampler (`sampling/_plan.py`): every epoch holds
    every sample once (`count` = `rows` = the dataset's length)."""

    starts: tuple[int, ...]
    shards: int

    @property
    def count(self) -> int:
        return self.starts[-1]

    @property
    def rows(self) -> int:
        return self.starts[-1]

    def order(self, seed: int, epoch: int, shuffle=True) -> WindowOrder:
        return WindowOrder(self.starts, self.shards, seed, epoch)


@dataclass(frozen=True)
class WindowOrder:
    """Position -> sample id for one epoch (see the module docstring)."""

    starts: tuple[int, ...]
    shards: int
    seed: int
    epoch: int

    def _layout(self):
        cached = getattr(self, "_cache", None)
        if cached is None:
            starts = np.asarray(self.starts, np.int64)
            count = len(starts) - 1
            perm = EpochOrder(count, self.seed, self.epoch)(np.arange(count, dtype=np.int64))
            sizes = (starts[1:] - starts[:-1])[perm]
            cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            edges = cum[np.arange(0, count, self.shards).tolist() + [count]]
            cached = (starts, perm, cum, edges)
            object.__setattr__(self, "_cache", cached)  # derived from the fields only
        return cached

    def __call__(self, positions) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        starts, perm, cum, edges = self._layout()
        n = int(cum[-1])
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            raise IndexError(f"positions must lie in [0, {n}), got {pos.min()}..{pos.max()}")
        out = np.empty_like(pos)
        window = np.searchsorted(edges, pos, side="right") - 1
        for w in np.unique(window).tolist():
            rows = window == w
            lo, hi = int(edges[w]), int(edges[w + 1])
            key = derive_key(self.seed, self.epoch, "window", w) & ((1 << 62) - 1)
            inside = EpochOrder(hi - lo, key, 0)(pos[rows] - lo) + lo
            slot = np.searchsorted(cum, inside, side="right") - 1  # shard in permuted order
            out[rows] = starts[perm[slot]] + (inside - cum[slot])
        return out
