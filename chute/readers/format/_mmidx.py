"""The MMIDIDX index layout of Megatron-LM / TouchDataset `.idx` files.

Layout (little-endian): 9-byte magic, u64 version (1), u8 dtype code, u64 N, u64 M,
int32 lengths[N] (in elements of the dtype), int64 byte pointers[N], int64 document indices[M].
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chute.errors import FormatError

__all__ = ["MAGIC", "DTYPE_CODES", "MmidxIndex", "encode_index", "read_index", "check_extents"]

MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, N, M
# Megatron-LM's dtype codes (the element type of the token/payload stream).
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
MAX_LENGTH = np.iinfo(np.int32).max


@dataclass(frozen=True)
class MmidxIndex:
    dtype: np.dtype
    lengths: np.ndarray  # int32 [N], elements of `dtype`
    pointers: np.ndarray  # int64 [N], bytes
    doc_idx: np.ndarray  # int64 [M]

    def byte_lengths(self) -> np.ndarray:
        return self.lengths.astype(np.int64) * self.dtype.itemsize


def encode_index(lengths: np.ndarray, pointers: np.ndarray, doc_idx: np.ndarray,
                 dtype_code: int = 1) -> bytes:
    lengths = np.ascontiguousarray(lengths, dtype="<i4")
    pointers = np.ascontiguousarray(pointers, dtype="<i8")
    doc_idx = np.ascontiguousarray(doc_idx, dtype="<i8")
    header = _HEADER.pack(MAGIC, 1, dtype_code, len(lengths), len(doc_idx))
    return b"".join((header, lengths.tobytes(), pointers.tobytes(), doc_idx.tobytes()))


def read_index(path: Path, *, trailing_ok: bool = False) -> MmidxIndex:
    """Read and validate an `.idx` file. `trailing_ok` tolerates extra bytes after the
    document indices (newer Megatron-LM writes per-sequence modes there)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{path}: index file is missing; restore it or re-convert "
                          "the dataset") from None
    if len(raw) < _HEADER.size or raw[:9] != MAGIC:
        raise FormatError(f"{path}: not an MMIDIDX index (wrong magic {raw[:9]!r}); "
                          "this file was not written by chute or Megatron-LM")
    _, version, code, n, m = _HEADER.unpack_from(raw)
    if version != 1:
        raise FormatError(f"{path}: MMIDIDX version {version} is not supported (only 1)")
    if code not in DTYPE_CODES:
        raise FormatError(f"{path}: unknown MMIDIDX dtype code {code}")
    expected = _HEADER.size + 12 * n + 8 * m
    if len(raw) < expected or (len(raw) != expected and not trailing_ok):
        raise FormatError(f"{path}: index is {len(raw)} bytes but its header (N={n}, M={m}) "
                          f"needs {expected}; the file is truncated or corrupt")
    off = _HEADER.size
    lengths = np.frombuffer(raw, "<i4", n, off)
    pointers = np.frombuffer(raw, "<i8", n, off + 4 * n)
    doc_idx = np.frombuffer(raw, "<i8", m, off + 12 * n)
    return MmidxIndex(DTYPE_CODES[code], lengths, pointers, doc_idx)


def check_extents(pointers: np.ndarray, nbytes: np.ndarray, size: int, bin_path: Path,
                  idx_path: Path) -> None:
    """Raise FormatError unless the records (an index's pointers and byte lengths) tile the
    `.bin` of `size` bytes: each inside it (checked without int64 overflow: a pointer near 2^63
    plus a length wraps negative), none overlapping another, and together covering every byte
    (chute and Megatron-LM write records back to back; a gap means the pair does not belong
    together). O(N) when the pointers are in order, as both write them."""
    if not len(pointers):
        return
    if nbytes.min() < 0 or pointers.min() < 0 or bool((pointers > size - nbytes).any()):
        raise FormatError(f"{bin_path}: its index {idx_path.name} points past the end of its "
                          f"{size} bytes; the .bin is truncated or the pair does not belong "
                          "together")
    if bool((np.diff(pointers) < 0).any()):
        order = np.argsort(pointers, kind="stable")
        pointers, nbytes = pointers[order], nbytes[order]
    ends = pointers + nbytes  # no overflow: every pointer is at most size - length
    overlap = np.flatnonzero(pointers[1:] < ends[:-1])
    if len(overlap):
        k = int(overlap[0])
        raise FormatError(f"{idx_path}: records overlap (bytes [{pointers[k]}, {ends[k]}) and "
                          f"[{pointers[k + 1]}, {ends[k + 1]}) of {bin_path.name}); the index "
                          "is corrupt: re-convert the dataset")
    covered = int(nbytes.sum())
    if covered != size:
        raise FormatError(f"{idx_path}: records cover {covered} of the {size} bytes of "
                          f"{bin_path.name} (gaps between them); the index is corrupt or the "
                          "pair does not belong together: re-convert the dataset")
