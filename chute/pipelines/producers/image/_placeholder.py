"""What a GPU reader decodes in place of a refused payload, and how the refusal travels.

A DALI graph decodes whatever bytes its source hands it, so a payload refused by its header
(`_image_header.refused_headers`) is swapped for a small valid JPEG with a window that fits it,
and the sample's `index` output carries the refusal: `refused_index(id, status)` is negative,
`refusals(index)` gives back the ids and per-sample status. The Pipeline then replaces the
sample as it replaces any failed one (docs/design.md, "Decompression bombs").
"""

from __future__ import annotations

import functools
import io

import numpy as np

__all__ = ["PLACEHOLDER_BOX", "placeholder_payload", "refused_index", "refusals"]

_CODES = 16  # status codes fit below this (chute.fallbacks._status)


PLACEHOLDER_BOX = (0, 0, 16, 16)  # its whole-image window: (top, left, height, width)


@functools.cache
def placeholder_payload() -> np.ndarray:
    """The encoded mid-grey placeholder, one array for the life of the process (DALI may read
    it in place long after the call)."""
    from PIL import Image

    side = PLACEHOLDER_BOX[2]
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (128, 128, 128)).save(buffer, format="JPEG", quality=90)
    encoded = np.frombuffer(buffer.getvalue(), dtype=np.uint8).copy()
    encoded.flags.writeable = False
    return encoded


def refused_index(sample_id: int, status: int) -> int:
    """The negative `index` a refused sample is delivered under.

    Args:
        sample_id: the global sample id (>= 0).
        status: its DecodeStatus code (1..15).
    """
    if not 0 < status < _CODES:
        raise ValueError(f"a refusal status is 1..{_CODES - 1}, got {status}")
    return -1 - (sample_id * _CODES + status)


def refusals(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample ids, per-sample status: 0 = delivered as decoded) of an `index` output.

    Args:
        index: the ids a reader delivered, refused ones as `refused_index` gave them.
    """
    index = np.asarray(index, dtype=np.int64).reshape(-1)
    refused = index < 0
    code = np.where(refused, -1 - index, 0)
    ids = np.where(refused, code // _CODES, index)
    status = np.where(refused, code % _CODES, 0).astype(np.uint8)
    return ids, status
