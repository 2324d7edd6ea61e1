"""The fused resize kernel on a real GPU (skipped where there is no CUDA device).

Compared with the same NumPy reference of the resize definition as the host-shim tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from chute._output_types import image_batch_shape, image_size_of, torch_dtype
from chute.kernels import IMAGENET_MEAN, IMAGENET_STD, resize_normalize
from tests._reference_resize import reference_batch
from tests.kernels.cases import OUTPUT_SIZES, make_batch
from tests.kernels.compare import assert_matches_reference

pytestmark = pytest.mark.gpu


def _device_sources(cupy, padded):
    """CuPy copies of the test images, keeping the wider row pitch of padded cases."""
    sources = []
    for image in padded:
        store = cupy.asarray(image.base if image.base is not None else image)
        sources.append(store[:, : image.shape[1]])
    return sources


def _torch_out(dtype, layout, batch, out_h, out_w):
    import torch

    shape = image_batch_shape(batch, out_h, out_w, layout)
    out = torch.empty(shape, dtype=torch_dtype(dtype), device="cuda")
    out.fill_(77)  # a stale value the kernel must overwrite
    return out


def _reference(images, boxes, flips, out, layout):
    h, w = image_size_of(out.shape, layout)
    dtype = out.cpu().numpy().dtype
    return reference_batch(images, boxes, flips, h, w, dtype, layout, IMAGENET_MEAN, IMAGENET_STD)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32])
@pytest.mark.parametrize("out_size", OUTPUT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpu_matches_reference(out_size, dtype, layout):
    import torch

    cupy = pytest.importorskip("cupy")
    images, padded, boxes, flips = make_batch(seed=1)
    out = _torch_out(dtype, layout, len(images), *out_size)
    stream = torch.cuda.current_stream()
    resize_normalize(_device_sources(cupy, padded), boxes, flips, out, layout=layout,
                     stream=stream)
    stream.synchronize()
    assert_matches_reference(out.cpu().numpy(), _reference(images, boxes, flips, out, layout))


def test_dense_batch_source():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    batch = rng.integers(0, 256, size=(4, 40, 30, 3), dtype=np.uint8)
    boxes = np.float32([[0, 0, 40, 30], [5.5, 3.25, 20, 17], [0, 0, 1, 1], [39, 29, 1, 1]])
    flips = np.array([False, True, True, False])
    out = _torch_out(np.float32, "NCHW", 4, 16, 12)
    resize_normalize(cupy.asarray(batch), boxes, flips, out, layout="NCHW")
    cupy.cuda.get_current_stream().synchronize()
    assert_matches_reference(out.cpu().numpy(), _reference(list(batch), boxes, flips, out, "NCHW"))


@pytest.mark.parametrize("stream_kind", ["cupy", "raw-pointer", "torch"])
def test_stream_ordering(stream_kind):
    """Sources are produced, resized and read back on a non-default stream; the consumer only
    waits on an event recorded after the launch. Wrong stream use would race and mismatch."""
    import torch

    cupy = pytest.importorskip("cupy")
    images, padded, boxes, flips = make_batch(seed=4)
    out = _torch_out(np.float16, "NCHW", len(images), 24, 32)
    torch.cuda.synchronize()  # the fill ran on torch's stream, which `work` does not wait for
    work = cupy.cuda.Stream(non_blocking=True)
    with work:
        # Enqueue slow work first so a launch on the wrong stream would read unfinished sources.
        big = cupy.ones((4096, 4096), dtype=cupy.float32)
        for _ in range(4):
            big = big @ big / 4096
        sources = _device_sources(cupy, padded)
    if stream_kind == "cupy":
        launch_on = work
    elif stream_kind == "raw-pointer":
        launch_on = work.ptr
    else:
        launch_on = torch.cuda.ExternalStream(work.ptr)
    resize_normalize(sources, boxes, flips, out, layout="NCHW", stream=launch_on)
    done = cupy.cuda.Event()
    done.record(work)
    reader = cupy.cuda.Stream(non_blocking=True)
    reader.wait_event(done)
    with reader:
        host = cupy.from_dlpack(out).get(stream=reader)
    reader.synchronize()
    assert_matches_reference(host, _reference(images, boxes, flips, out, "NCHW"))


class _WrittenOn:
    """A CuPy array whose array interface names the stream it was written on."""

    def __init__(self, array, stream):
        self.array, self.stream = array, stream

    @property
    def __cuda_array_interface__(self):
        return {**self.array.__cuda_array_interface__, "stream": self.stream.ptr}


def test_sources_written_on_another_stream_are_waited_for():
    """The producer's stream (the array interface's "stream" key, as nvImageCodec reports it)
    is busy when the kernel is launched on another stream: the launch must wait for it."""
    import torch

    cupy = pytest.importorskip("cupy")
    images, padded, boxes, flips = make_batch(seed=6)
    out = _torch_out(np.float32, "NHWC", len(images), 20, 28)
    torch.cuda.synchronize()
    producer = cupy.cuda.Stream(non_blocking=True)
    with producer:
        big = cupy.ones((4096, 4096), dtype=cupy.float32)
        for _ in range(4):  # slow work first: an unordered launch would read unwritten sources
            big = big @ big / 4096
        sources = [cupy.empty_like(s) for s in _device_sources(cupy, padded)]
        for dst, src in zip(sources, _device_sources(cupy, padded), strict=True):
            dst[...] = src
    launch = torch.cuda.Stream()
    resize_normalize([_WrittenOn(s, producer) for s in sources], boxes, flips, out,
                     layout="NHWC", stream=launch)
    launch.synchronize()
    assert_matches_reference(out.cpu().numpy(), _reference(images, boxes, flips, out, "NHWC"))
