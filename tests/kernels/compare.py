"""Helpers shared by the CPU (host shim) and GPU kernel tests."""

from __future__ import annotations

import numpy as np

from chute.kernels import IMAGENET_MEAN, IMAGENET_STD, kernel_name
from chute.kernels._plan import (
    BLOCK,
    launch_grid,
    output_view,
    pack_args,
    source_views,
    views_plan,
)


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


def run_shim(lib, sources, boxes, flips, out, layout, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Same host-side path as chute.kernels.resize_normalize, with the shim as the 'device'.

    sources: host NumPy arrays (dressed with HostAsDevice here) or objects that already expose
    a __cuda_array_interface__ over host memory (e.g. DALI CPU tensors, see CpuAsCuda).
    """
    target = output_view(HostAsDevice(out), layout)
    wrapped = [s if hasattr(s, "__cuda_array_interface__") else HostAsDevice(s) for s in sources]
    packed = pack_args(source_views(wrapped), boxes, flips, mean, std)
    base = packed.buffer.ctypes.data
    grid = np.array(launch_grid(target), dtype=np.uint32)
    block = np.array(BLOCK, dtype=np.uint32)
    rc = lib.run_kernel(
        kernel_name(target.dtype, layout).encode(), grid.ctypes.data, block.ctypes.data,
        base + packed.srcs, base + packed.shapes, base + packed.boxes, base + packed.flips,
        base + packed.norm, target.ptr, target.height, target.width,
    )
    assert rc == 0


def run_views_shim(lib, sources, boxes, flips, outs, layout, mean=IMAGENET_MEAN,
                   std=IMAGENET_STD):
    """Same host-side path as chute.kernels.resize_normalize_views (one launch for every
    view), with the shim as the 'device'. sources: host HWC uint8 arrays (or CPU tensors, or
    objects exposing a __cuda_array_interface__ over host memory); outs: V host batches."""
    targets = [output_view(HostAsDevice(out), layout) for out in outs]
    wrapped = [s if hasattr(s, "__cuda_array_interface__") else HostAsDevice(np.asarray(s))
               for s in sources]
    plan = views_plan(source_views(wrapped), boxes, flips, targets, mean, std)
    base = plan.buffer.ctypes.data
    grid = np.array(plan.grid, dtype=np.uint32)
    block = np.array(BLOCK, dtype=np.uint32)
    at = {name: base + offset for name, offset in plan.offsets.items()}
    rc = lib.run_views_kernel(
        plan.kernel.encode(), grid.ctypes.data, block.ctypes.data, at["srcs"], at["shapes"],
        at["boxes"], at["flips"], at["norm"], at["outs"], at["views"], plan.num_views,
    )
    assert rc == 0
    return plan


class CpuAsCuda:
    """A host tensor's own __array_interface__ (e.g. DALI's TensorCPU, typestr "=B") presented
    unchanged as a __cuda_array_interface__, as DALI's TensorGPU presents device memory."""

    def __init__(self, tensor):
        self.tensor = tensor  # keeps the memory alive

    @property
    def __cuda_array_interface__(self):
        return dict(self.tensor.__array_interface__)
