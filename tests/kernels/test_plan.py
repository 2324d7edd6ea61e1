"""Host-side launch planning of the fused kernel (no CUDA needed)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from chute.errors import BackendUnavailableError
from chute.kernels import resize_normalize, stream_pointer
from chute.kernels._plan import launch_grid, output_view, pack_args, source_views
from tests.kernels.compare import HostAsDevice


def test_source_views_of_a_list_with_row_pitch():
    wide = np.zeros((4, 10, 3), dtype=np.uint8)
    views = source_views([HostAsDevice(np.zeros((5, 7, 3), np.uint8)), HostAsDevice(wide[:, :6])])
    assert [(v.height, v.width, v.pitch) for v in views] == [(5, 7, 21), (4, 6, 30)]
    assert views[1].ptr == wide.ctypes.data


def test_source_views_of_a_dense_batch():
    batch = np.zeros((3, 4, 5, 3), dtype=np.uint8)
    views = source_views(HostAsDevice(batch))
    assert [v.ptr - batch.ctypes.data for v in views] == [0, 60, 120]
    assert {(v.height, v.width, v.pitch) for v in views} == {(4, 5, 15)}


@pytest.mark.parametrize("bad, message", [
    (np.zeros((4, 5), np.uint8), "HWC uint8 RGB"),
    (np.zeros((4, 5, 4), np.uint8), "HWC uint8 RGB"),
    (np.zeros((4, 5, 3), np.float32), "HWC uint8 RGB"),
    (np.zeros((4, 5, 3), np.uint8)[:, ::2], "strides"),
    (np.zeros((0, 5, 3), np.uint8), "empty"),
])
def test_source_views_reject_what_the_kernel_cannot_read(bad, message):
    with pytest.raises(ValueError, match=message):
        source_views([HostAsDevice(bad)])


def test_source_views_reject_host_arrays():
    with pytest.raises(TypeError, match="source sample 0 .* not a CUDA array"):
        source_views([np.zeros((2, 2, 3), np.uint8)])


def test_output_view_and_grid():
    out = output_view(HostAsDevice(np.zeros((2, 3, 33, 65), np.float16)), "NCHW")
    assert (out.batch, out.height, out.width, out.dtype) == (2, 33, 65, np.float16)
    assert launch_grid(out) == (3, 5, 2)
    nhwc = output_view(HostAsDevice(np.zeros((4, 8, 32, 3), np.uint8)), "NHWC")
    assert launch_grid(nhwc) == (1, 1, 4)


@pytest.mark.parametrize("shape, dtype, layout, message", [
    ((2, 3, 4, 4), np.float32, "CHW", "layout"),
    ((2, 4, 4, 3), np.float32, "NCHW", "3 channels"),
    ((2, 3, 4, 4), np.float64, "NCHW", "dtype"),
])
def test_output_view_rejects(shape, dtype, layout, message):
    with pytest.raises(ValueError, match=message):
        output_view(HostAsDevice(np.zeros(shape, dtype)), layout)


def test_output_view_rejects_non_contiguous():
    with pytest.raises(ValueError, match="C-contiguous"):
        output_view(HostAsDevice(np.zeros((2, 3, 4, 8), np.float32)[..., ::2]), "NCHW")


def test_pack_args_layout_round_trips():
    a, b = np.zeros((10, 12, 3), np.uint8), np.zeros((5, 6, 3), np.uint8)
    views = source_views([HostAsDevice(a), HostAsDevice(b)])
    boxes = [(1.5, 2.0, 8.0, 9.5), (0.0, 0.0, 5.0, 6.0)]
    packed = pack_args(views, boxes, [True, False], (0.5, 0.25, 0.0), (1.0, 0.5, 0.25))
    buf = packed.buffer
    assert buf.dtype == np.uint8 and packed.srcs % 8 == 0 and packed.boxes % 4 == 0
    np.testing.assert_array_equal(buf[packed.srcs:packed.srcs + 16].view(np.uint64),
                                  [a.ctypes.data, b.ctypes.data])
    np.testing.assert_array_equal(buf[packed.boxes:packed.boxes + 32].view(np.float32),
                                  np.float32(boxes).ravel())
    np.testing.assert_array_equal(buf[packed.shapes:packed.shapes + 24].view(np.int32),
                                  [10, 12, 36, 5, 6, 18])
    np.testing.assert_array_equal(buf[packed.flips:packed.flips + 2], [1, 0])
    np.testing.assert_array_equal(buf[packed.norm:packed.norm + 24].view(np.float32),
                                  np.float32([127.5, 63.75, 0, 255, 127.5, 63.75]))


@pytest.mark.parametrize("box", [
    (0, 0, 0, 5), (0, 0, 5, -1), (-1, 0, 5, 5), (0, 0, 10.5, 12), (0, 3, 10, 10), (np.nan, 0, 1, 1),
])
def test_pack_args_rejects_boxes_outside_the_source(box):
    views = source_views([HostAsDevice(np.zeros((10, 12, 3), np.uint8))])
    with pytest.raises(ValueError, match="sample 0"):
        pack_args(views, [box], [False], (0, 0, 0), (1, 1, 1))


def test_pack_args_checks_lengths_and_std():
    views = source_views([HostAsDevice(np.zeros((4, 4, 3), np.uint8))])
    with pytest.raises(ValueError, match="flips"):
        pack_args(views, [(0, 0, 4, 4)], [True, False], (0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match="std"):
        pack_args(views, [(0, 0, 4, 4)], [True], (0, 0, 0), (1, 0, 1))


class _TorchLikeStream:
    cuda_stream = 1234


class _CupyLikeStream:
    ptr = 5678


def test_stream_pointer():
    assert stream_pointer(None) is None
    assert stream_pointer(42) == 42
    assert stream_pointer(_TorchLikeStream()) == 1234
    assert stream_pointer(_CupyLikeStream()) == 5678
    with pytest.raises(TypeError, match="stream"):
        stream_pointer("default")


def test_launch_without_cuda_fails_fast():
    from chute._device import cuda_device_count

    if cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    out = HostAsDevice(np.zeros((1, 3, 2, 2), np.float32))
    with pytest.raises(BackendUnavailableError, match="no CUDA device"):
        resize_normalize([HostAsDevice(np.zeros((2, 2, 3), np.uint8))], [(0, 0, 2, 2)], [False],
                         out)


@pytest.mark.slow
def test_import_does_not_load_cupy():
    code = "import sys, chute.kernels; print('cupy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_roi_windows_follow_the_cpu_decoders_margin_rule():
    """The GPU decode windows use the CPU decoder's margin (chute/fallbacks/_kernels.py _span)."""
    from chute.fallbacks._kernels import _span
    from chute.kernels import roi_windows

    rng = np.random.default_rng(0)
    sizes = rng.integers(8, 600, size=(200, 2))
    lengths = np.maximum(1, (rng.uniform(0.05, 1.0, (200, 2)) * sizes).astype(np.int64))
    starts = (rng.uniform(0, 1, (200, 2)) * (sizes - lengths)).astype(np.int64)
    boxes = np.concatenate([starts, lengths], axis=1)
    out = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
    windows, inner = roi_windows(boxes, sizes, out)
    for b in range(len(boxes)):
        for axis in range(2):
            first, stop = _span.py_func(float(starts[b, axis]), float(lengths[b, axis]),
                                        out[axis], int(sizes[b, axis]))
            assert (windows[b, axis], windows[b, 2 + axis]) == (first, stop - first)
    np.testing.assert_array_equal(inner[:, :2], starts - windows[:, :2])
    np.testing.assert_array_equal(inner[:, 2:], lengths)
    assert (windows[:, :2] >= 0).all() and (windows[:, :2] + windows[:, 2:] <= sizes).all()


def test_source_views_accept_dalis_uint8_typestr():
    """DALI's TensorGPU reports uint8 as "=B" (not "|u1"): compare dtypes, not strings."""
    class DaliLike:
        __cuda_array_interface__ = {"shape": (4, 5, 3), "typestr": "=B", "data": (4096, False),
                                    "strides": None, "version": 2}

    (view,) = source_views([DaliLike()])
    assert (view.ptr, view.height, view.width, view.pitch) == (4096, 4, 5, 15)
