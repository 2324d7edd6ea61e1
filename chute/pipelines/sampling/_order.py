"""The order of an epoch: a keyed bijection of [0, N), computed per position in O(1) memory.

Position p of epoch e holds sample `EpochOrder(n, seed, e)(p)`. The bijection is a Feistel
network on `bits = ceil(log2 N)` bits (at least 2), split into a high half of `bits // 2` bits
and a low half of the rest (unbalanced when bits is odd). Each round XORs one half with a keyed
hash of the other, alternating halves, so every round -- and the network -- is a permutation of
[0, 2**bits). Values that land in [N, 2**bits) are walked again through the network (cycle
walking) until they fall inside [0, N); since 2**bits < 2N this takes under 2 passes on average,
and it keeps a bijection of [0, N). No permutation array, no shuffle buffer: any position of any
epoch is computed directly, which is what makes resume O(1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, random_u64

__all__ = ["EpochOrder"]

# Enough rounds for a keyed permutation whose outputs pass simple statistical tests
# (4 rounds are the Luby-Rackoff minimum; more help unbalanced splits).
_ROUNDS = 8


@dataclass(frozen=True)
class EpochOrder:
    """Keyed bijection of [0, n) for (seed, epoch); call it on int positions (scalar or array)."""

    n: int
    seed: int
    epoch: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"EpochOrder needs n >= 0, got {self.n}")

    @property
    def _key(self) -> int:
        return derive_key(self.seed, self.epoch, "order")

    def __call__(self, positions: np.ndarray | int) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n}), got {pos.min()}..{pos.max()}")
        if self.n <= 1:
            return pos.copy()
        bits = max(int(self.n - 1).bit_length(), 2)
        hi_bits = bits // 2
        lo_bits = bits - hi_bits
        key = self._key
        x = pos.astype(np.uint64)
        todo = np.ones(x.shape, dtype=bool)
        while True:
            x[todo] = _feistel(x[todo], key, hi_bits, lo_bits)
            todo = x >= np.uint64(self.n)
            if not todo.any():
                return x.astype(np.int64)


def _feistel(x: np.ndarray, key: int, hi_bits: int, lo_bits: int) -> np.ndarray:
    lo_mask = np.uint64((1 << lo_bits) - 1)
    hi_mask = np.uint64((1 << hi_bits) - 1)
    lo = x & lo_mask
    hi = x >> np.uint64(lo_bits)
    for r in range(_ROUNDS):
        if r % 2 == 0:
            hi = hi ^ (random_u64(key, lo, stream=r) & hi_mask)
        else:
            lo = lo ^ (random_u64(key, hi, stream=r) & lo_mask)
    return (hi << np.uint64(lo_bits)) | lo
