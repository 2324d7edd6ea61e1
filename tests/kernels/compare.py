"""Helpers shared by the CPU (host shim) and GPU kernel tests."""

from __future__ import annotations

import numpy as np


class HostAsDevice:
    """A host NumPy array dressed as a CUDA array: the shim dereferences host pointers."""

    def __init__(self, array: np.ndarray):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        a = self.array
        strides = None if a.flags.c_contiguous else a.strides
        return {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                "strides": strides, "version": 3}


def assert_matches_reference(got: np.ndarray, want: np.ndarray) -> None:
    """float32: 1e-4 absolute; float16: at most 1 ulp (or 1e-5 absolute next to 0, where the
    float32 error of v - 255*mean exceeds an fp16 ulp); uint8: off by at most 1, rarely."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == np.uint8:
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        assert diff.max() <= 1
        assert (diff == 0).mean() >= 0.99
    elif got.dtype == np.float16:
        ulp = np.spacing(np.abs(want)).astype(np.float32)
        diff = np.abs(got.astype(np.float32) - want.astype(np.float32))
        assert (diff <= np.maximum(ulp, 1e-5)).all()
        assert (diff == 0).mean() >= 0.95
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
