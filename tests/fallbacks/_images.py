"""Test helpers of the CPU fallback: payloads packed like Dataset.gather and an independent
full-size decode. (Generated images and payloads: tests/_media.py.)"""

from __future__ import annotations

import ctypes

import numpy as np

from chute.fallbacks import turbojpeg_library

__all__ = ["pack", "turbojpeg_rgb"]


def pack(payloads: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) laid out as Dataset.gather returns them."""
    data = np.frombuffer(b"".join(payloads), dtype=np.uint8).copy()
    offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in payloads])
    return data, offsets


def turbojpeg_rgb(payload: bytes) -> np.ndarray:
    """Full-size RGB decode through plain ctypes calls (independent of chute's kernels)."""
    lib = ctypes.CDLL(turbojpeg_library())
    lib.tjInitDecompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(lib.tjInitDecompress())
    try:
        w, h, sub, cs = (ctypes.c_int() for _ in range(4))
        assert lib.tjDecompressHeader3(handle, payload, ctypes.c_ulong(len(payload)),
                                       ctypes.byref(w), ctypes.byref(h), ctypes.byref(sub),
                                       ctypes.byref(cs)) == 0
        out = np.zeros((h.value, w.value, 3), dtype=np.uint8)
        assert lib.tjDecompress2(handle, payload, ctypes.c_ulong(len(payload)),
                                 out.ctypes.data_as(ctypes.c_void_p), w.value, 0, h.value,
                                 0, 0) == 0
        return out
    finally:
        lib.tjDestroy(handle)
