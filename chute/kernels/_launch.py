"""Launch the fused resize/flip/normalize kernel with CuPy (imported lazily, only here)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import numpy as np

from chute._device import require_cuda
from chute.errors import BackendUnavailableError
from chute.kernels._arg_ring import ArgRing
from chute.kernels._plan import (
    BLOCK,
    IMAGENET_MEAN,
    IMAGENET_STD,
    kernel_name,
    launch_grid,
    output_view,
    pack_args,
    pending_streams,
    source_views,
    views_plan,
)

__all__ = ["resize_normalize", "resize_normalize_views", "kernel_source", "stream_pointer",
           "external_stream"]

_SOURCE_FILE = "resize_normalize.cu"
_NVRTC_OPTIONS = ("-std=c++17",)
# Launches whose argument copies may be in flight per device before the host waits for one.
_ARG_RING_SLOTS = 8


def kernel_source() -> str:
    """The CUDA C source of the fused kernel, as shipped inside the package."""
    return resources.files("chute.kernels").joinpath(_SOURCE_FILE).read_text(encoding="utf-8")


def stream_pointer(stream) -> int | None:
    """The raw cudaStream_t of `stream`: None (caller's current stream), an int pointer, a
    CuPy stream (`.ptr`), a torch.cuda.Stream (`.cuda_stream`) or a DALI stream handle."""
    if stream is None:
        return None
    if isinstance(stream, (int, np.integer)):
        return int(stream)
    for attr in ("ptr", "cuda_stream", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, (int, np.integer)):
            return int(value)
    raise TypeError(
        f"stream must be None, an int cudaStream_t, a CuPy stream or a torch.cuda.Stream; "
        f"got {type(stream).__name__}"
    )


class _StreamHandle:
    """A raw cudaStream_t behind the CUDA stream protocol (`__cuda_stream__`)."""

    def __init__(self, ptr: int):
        self.ptr = int(ptr)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


@functools.cache
def _borrowed_stream_type(stream_type: Any) -> Any:
    """CuPy 13 (no `Stream.from_external`): a `stream_type` that wraps a stream it does not
    own, neither creating nor destroying one."""

    class BorrowedStream(stream_type):
        def __init__(self, ptr: int, device_id: int):
            # the base class's __init__ only records both; Stream's would create a stream
            super(stream_type, self).__init__(ptr, device_id)

        def __del__(self) -> None:
            pass  # the owner destroys it

    return BorrowedStream


def external_stream(cupy, ptr: int, device_id: int):
    """CuPy's view of a stream owned by someone else (torch, DALI, nvImageCodec) on the current
    device `device_id`: `cupy.cuda.Stream.from_external` where CuPy has it (14 and later)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(ptr))
    return _borrowed_stream_type(cupy.cuda.Stream)(int(ptr), device_id)


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(
            "chute.kernels needs CuPy to launch its CUDA kernels, but `import cupy` failed "
            f"({exc}). Install it: pip install 'chute[dali]' ('chute[dali-cu13]' for a CUDA 13 "
            "torch)."
        ) from exc
    return cupy


@functools.cache
def _module(device_id: int):
    """The compiled RawModule for one device (compiled by NVRTC on first use, cached by CuPy)."""
    cupy = _import_cupy()
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=kernel_source(), options=_NVRTC_OPTIONS)


@functools.cache
def _arg_ring(device_id: int) -> ArgRing:
    """The pinned argument ring of one device (shared by every caller on it; thread-safe)."""
    cupy = _import_cupy()
    import cupyx

    def alloc(nbytes: int) -> np.ndarray:
        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    return ArgRing(_ARG_RING_SLOTS, alloc, lambda: cupy.cuda.Event(disable_timing=True))


def resize_normalize(
    sources,
    boxes,
    flips,
    out,
    *,
    layout: str = "NCHW",
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    stream=None,
) -> None:
    """Crop + antialiased bilinear resize + flip + normalize a batch on the GPU, into `out`.

    Args:
        sources: B decoded HWC uint8 RGB images in device memory (a DALI TensorListGPU, a list
            of CuPy arrays / torch CUDA tensors / DALI TensorGPU, or one dense [B, H, W, 3]
            array).
        boxes: [B, 4] (y0, x0, height, width) floats in each source's pixel units.
        flips: [B] bools, True mirrors the sample horizontally.
        out: preallocated contiguous CUDA tensor (torch or CuPy), uint8/float16/float32, shaped
            [B, 3, H, W] (layout "NCHW") or [B, H, W, 3] ("NHWC"). uint8 output ignores
            mean/std.
        layout: "NCHW" or "NHWC".
        mean, std: per-channel normalisation, fractions of 255.
        stream: where to launch (None = CuPy's current stream). The call only enqueues work:
            the sources must stay alive and unchanged until the stream reaches the kernel.
            A source whose array interface names another stream ("stream" key) is waited for.
    """
    require_cuda("chute.kernels.resize_normalize")
    cupy = _import_cupy()
    target = output_view(out, layout)
    views = source_views(sources)
    if len(views) != target.batch:
        raise ValueError(f"{len(views)} source images for an output batch of {target.batch}")
    if target.batch == 0 or target.height == 0 or target.width == 0:
        return
    packed = pack_args(views, boxes, flips, mean, std)
    offsets = (packed.srcs, packed.shapes, packed.boxes, packed.flips, packed.norm)
    _launch(cupy, views, packed.buffer, target.ptr, stream,
            lambda base: (kernel_name(target.dtype, layout), launch_grid(target),
                          (*(np.uint64(base + o) for o in offsets), np.uint64(target.ptr),
                           np.int32(target.height), np.int32(target.width))))


def resize_normalize_views(
    sources,
    boxes,
    flips,
    outs,
    *,
    layout: str = "NCHW",
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    stream=None,
) -> None:
    """Multi-crop views on the GPU (docs/views.md): V views of every source, each cropped,
    resized, flipped and normalised into its own output batch, all in one kernel launch.

    Args:
        sources: B decoded HWC uint8 RGB images in device memory (as `resize_normalize`
            takes them).
        boxes: [B, V, 4] (y0, x0, height, width) floats in each source's pixel units: view v
            of sample b reads boxes[b, v].
        flips: [B, V] bools.
        outs: V preallocated contiguous CUDA tensors (torch or CuPy) of one dtype (uint8,
            float16, float32) and `layout`, view v shaped [B, 3, h_v, w_v] ("NCHW") or
            [B, h_v, w_v, 3] ("NHWC"). uint8 output ignores mean/std.
        layout: "NCHW" or "NHWC".
        mean, std: per-channel normalisation, fractions of 255.
        stream: where to launch, as for `resize_normalize`; the sources must stay alive until
            the stream reaches the kernel.
    """
    require_cuda("chute.kernels.resize_normalize_views")
    cupy = _import_cupy()
    targets = [output_view(out, layout) for out in outs]
    views = source_views(sources)
    plan = views_plan(views, boxes, flips, targets, mean, std)
    if not views or all(t.height == 0 or t.width == 0 for t in targets):
        return
    names = ("srcs", "shapes", "boxes", "flips", "norm", "outs", "views")
    _launch(cupy, views, plan.buffer, targets[0].ptr, stream,
            lambda base: (plan.kernel, plan.grid,
                          (*(np.uint64(base + plan.offsets[k]) for k in names),
                           np.int32(plan.num_views))))


def _launch(cupy, views, buffer: np.ndarray, out_ptr: int, stream, launch) -> None:
    """Copy `buffer` (the packed arguments) to the device and launch on `stream`, after the
    streams the sources were written on; `launch(base)` -> (entry point, grid, arguments)."""
    device_id = int(cupy.cuda.runtime.pointerGetAttributes(out_ptr).device)
    with cupy.cuda.Device(device_id):
        ptr = stream_pointer(stream)
        launch_stream = (
            cupy.cuda.get_current_stream() if ptr is None
            else external_stream(cupy, ptr, device_id)
        )
        # sources written on another stream (their array interface says which): wait for it
        for pending in pending_streams(views, int(launch_stream.ptr)):
            written = cupy.cuda.Event(disable_timing=True)
            cupy.cuda.runtime.eventRecord(written.ptr, pending)
            launch_stream.wait_event(written)
        with launch_stream:  # allocation, copy and launch all go to this stream
            # CuPy's memory pool is stream-ordered per stream, so freeing `args` when this
            # function returns cannot hand its memory to other work before the kernel ran.
            # Through a pinned ring: asynchronous, never blocking the producer thread on a
            # pageable copy (chute/kernels/_arg_ring.py).
            args = cupy.empty(buffer.size, dtype=cupy.uint8)
            _arg_ring(device_id).copy_to_device(buffer, args, launch_stream)
            name, grid, arguments = launch(args.data.ptr)
            kernel = _module(device_id).get_function(name)
            kernel(grid, BLOCK, arguments)
