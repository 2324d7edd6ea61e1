"""Keyed, counter-based randomness: every random number is a pure function of (key, counter).

No generator state exists anywhere, so the same (seed, epoch, sample id) gives the same value on
any rank, thread, process or backend. The mixer is SplitMix64's finaliser, applied to the key
combined with the counter; it is a bijection of 64-bit words with good avalanche.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mix64", "derive_key", "uniform", "uniform_streams", "random_u64"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U53 = float(1 << 53)


def mix64(x: np.ndarray | int) -> np.ndarray:
    """SplitMix64 finaliser on uint64 values (vectorised, wraps modulo 2**64)."""
    z = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return z


def derive_key(*parts: int | str) -> int:
    """A 64-bit key from small ints and strings, e.g. derive_key(seed, epoch, "crop")."""
    acc = np.uint64(0x243F6A8885A308D3)
    for part in parts:
        if isinstance(part, str):
            value = int.from_bytes(part.encode()[:8].ljust(8, b"\0"), "little")
        else:
            value = int(part) & 0xFFFFFFFFFFFFFFFF
        with np.errstate(over="ignore"):
            acc = mix64(acc ^ np.uint64(value))
    return int(acc)


def random_u64(key: int, counters: np.ndarray | int,
               stream: np.ndarray | int = 0) -> np.ndarray:
    """64 random bits per counter for this key; `stream` separates independent draws (an array
    of streams broadcasts against `counters`, as `uniform_streams` uses it)."""
    c = np.asarray(counters, dtype=np.uint64)
    with np.errstate(over="ignore"):
        k = mix64(np.uint64(key & 0xFFFFFFFFFFFFFFFF) ^ mix64(np.asarray(stream, np.uint64)))
        return mix64(c * _GOLDEN ^ k)


def uniform(key: int, counters: np.ndarray | int, stream: np.ndarray | int = 0) -> np.ndarray:
    """Uniform float64 in [0, 1) per counter, 53 bits of precision."""
    bits = random_u64(key, counters, stream) >> np.uint64(11)
    return bits.astype(np.float64) / _U53


def uniform_streams(key: int, counters: np.ndarray, streams) -> np.ndarray:
    """float64 [S, N]: row s is `uniform(key, counters, streams[s])`, bit for bit, in one
    vectorised pass (the integer arithmetic is the same, element by element).

    Args:
        key: the key, as for `uniform`.
        counters: N counters (e.g. sample ids).
        streams: S stream numbers.
    """
    return uniform(key, np.asarray(counters, dtype=np.uint64).reshape(1, -1),
                   np.asarray(streams, dtype=np.uint64).reshape(-1, 1))
