"""Which inner chunks of a sharded zarr v3 array (the sharding_indexed codec) a shard's index
records as empty.

zarr reads an inner chunk its shard's index records as empty (offset and size both 2^64 - 1)
as the array's fill value, as it reads an absent chunk file. A shard left incomplete (a writer
stopped part way, rows never written) reads as fill values without a word, so chute treats
such chunks as missing unless the array was opened with missing_chunks="fill" (docs/latents.md,
"Missing chunks"). The index is read here, not through zarr: a few hundred bytes at one end of
the shard file, once per shard file (and again only when the file changes).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["ShardIndex", "shard_index"]

_EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class ShardIndex:
    """How to find the empty inner chunks of an array's shard files.

    Attributes:
        shape: the array's shape. shard: a shard's shape. inner: an inner chunk's shape.
        nbytes: the encoded index's size; at_end: whether it ends the shard file (else starts
            it); dtype: its uint64 byte order. why_not: why the index cannot be read here (a
            layout chute does not parse), else None.
    """

    shape: tuple[int, ...]
    shard: tuple[int, ...]
    inner: tuple[int, ...]
    nbytes: int
    at_end: bool
    dtype: np.dtype
    why_not: str | None = None

    @property
    def per_shard(self) -> tuple[int, ...]:
        """Inner chunks per shard along each dimension."""
        return tuple(s // c for s, c in zip(self.shard, self.inner, strict=True))

    def empty_blocks(self, fd: int, position: tuple[int, ...]) -> np.ndarray | None:
        """Of the shard file open as `fd` (not closed here), at shard grid `position`: bool
        per block of inner-chunk rows, True where an inner chunk that overlaps the array is
        recorded empty. None when the file is shorter than its index (zarr's read names that
        as a truncated file)."""
        size = os.fstat(fd).st_size
        if size < self.nbytes:
            return None
        raw = os.pread(fd, self.nbytes, size - self.nbytes if self.at_end else 0)
        if len(raw) < self.nbytes:
            return None
        count = math.prod(self.per_shard)
        pairs = np.frombuffer(raw, self.dtype, count * 2).reshape(*self.per_shard, 2)
        empty = (pairs[..., 0] == _EMPTY) & (pairs[..., 1] == _EMPTY)
        # inner chunks past the array's end (in any dimension) are never written
        for d, (n, at, s, c) in enumerate(zip(self.shape, position, self.shard, self.inner,
                                              strict=True)):
            inside = at * s + np.arange(empty.shape[d]) * c < n
            empty &= inside.reshape([-1 if k == d else 1 for k in range(empty.ndim)])
        return empty.reshape(empty.shape[0], -1).any(axis=1)


def shard_index(array) -> ShardIndex | None:
    """`array`'s ShardIndex, or None when it is not sharded."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    codecs = tuple(getattr(array.metadata, "codecs", ()))  # v2 arrays have none
    if not any(isinstance(c, ShardingCodec) for c in codecs):
        return None
    shape = tuple(int(d) for d in array.shape)
    shards = getattr(array, "shards", None) or tuple(array.chunks)
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        # e.g. a compressor after the sharding codec: the shard file is compressed whole
        return ShardIndex(shape, tuple(int(s) for s in shards), tuple(array.chunks), 0, True,
                          np.dtype("<u8"), f"codecs {[type(c).__name__ for c in codecs]}")
    codec = codecs[0]
    inner = tuple(int(c) for c in codec.chunk_shape)
    index_codecs = tuple(codec.index_codecs)
    crc = len(index_codecs) == 2 and isinstance(index_codecs[1], Crc32cCodec)
    if not index_codecs or not isinstance(index_codecs[0], BytesCodec) or \
            len(index_codecs) > 1 + crc:
        return ShardIndex(shape, tuple(int(s) for s in shards), inner, 0, True,
                          np.dtype("<u8"), f"index codecs {index_codecs}")
    big = getattr(index_codecs[0].endian, "value", "little") == "big"
    count = math.prod(int(s) // c for s, c in zip(shards, inner, strict=True))
    at_end = getattr(codec.index_location, "value", "end") == "end"
    return ShardIndex(shape, tuple(int(s) for s in shards), inner, count * 16 + 4 * crc,
                      at_end, np.dtype(">u8" if big else "<u8"))
