"""Host-side launch plan of the fused resize kernel: pure NumPy, no CUDA library needed.

Everything here only reads `__cuda_array_interface__` dictionaries and packs numbers, so it is
tested on machines without a GPU (also by feeding host pointers to the kernel's C++ host shim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD, scaled_mean_std
from chute._output_types import check_layout, image_size_of, output_dtype
from chute._resize_box import BOX_SLACK, boxes_outside, decode_windows

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BLOCK",
    "SourceView",
    "OutputView",
    "PackedArgs",
    "source_views",
    "pending_streams",
    "output_view",
    "kernel_name",
    "launch_grid",
    "pack_args",
    "ViewsPlan",
    "views_plan",
    "views_kernel_name",
    "roi_windows",
    "union_windows",
]


# 32 threads along x make the stores of a warp contiguous in both layouts; 8 rows give 256
# threads per block, matching __launch_bounds__(256) in the .cu.
BLOCK = (32, 8, 1)
_MAX_GRID_Z = 65535
_MAX_GRID_Y = 65535
_MAX_GRID_X = 2**31 - 1
# The suffix of the kernel entry point of each output dtype name.
_KERNEL_DTYPES = {"uint8": "u8", "float16": "f16", "float32": "f32"}


@dataclass(frozen=True)
class SourceView:
    """One decoded HWC uint8 RGB image in device memory. `stream`: the stream its producer
    wrote it on, which the kernel's stream must wait for (the array interface's "stream" key:
    None when nothing is pending, 1 the legacy default stream, 2 the per-thread one, else a
    cudaStream_t)."""

    ptr: int
    height: int
    width: int
    pitch: int  # bytes between rows
    stream: int | None = None


@dataclass(frozen=True)
class OutputView:
    """The preallocated output batch."""

    ptr: int
    batch: int
    height: int
    width: int
    dtype: np.dtype
    layout: str


@dataclass(frozen=True)
class PackedArgs:
    """All per-launch metadata in one host buffer, copied to the device in one transfer.

    The offsets are byte offsets of the kernel's srcs, shapes, boxes, flips and norm arrays.
    """

    buffer: np.ndarray  # uint8
    srcs: int
    shapes: int
    boxes: int
    flips: int
    norm: int


def _interface(obj, what: str) -> dict:
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is None:
        raise TypeError(
            f"{what} is a {type(obj).__name__}, which is not a CUDA array; pass CuPy arrays, "
            "torch CUDA tensors, DALI TensorGPU/TensorListGPU or anything exposing "
            "__cuda_array_interface__"
        )
    return iface


def _stream_of(iface: dict, what: str) -> int | None:
    """The "stream" key of a version-3 array interface (absent before version 3: None)."""
    stream = iface.get("stream")
    if stream is None:
        return None
    if int(stream) == 0:
        raise ValueError(f"{what} reports stream 0 in its __cuda_array_interface__, which the "
                         "interface forbids; report 1 for the legacy default stream or None")
    return int(stream)


def _source_view(iface: dict, ptr: int, shape: Sequence[int], strides, what: str) -> SourceView:
    # Compare dtypes, not strings: DALI reports uint8 as "=B", NumPy/CuPy/torch as "|u1".
    if np.dtype(iface["typestr"]) != np.uint8 or len(shape) != 3 or shape[2] != 3:
        raise ValueError(
            f"{what} must be an HWC uint8 RGB image (shape (H, W, 3), dtype uint8), got shape "
            f"{tuple(shape)} typestr {iface['typestr']!r}; decode to RGB uint8 first"
        )
    height, width = int(shape[0]), int(shape[1])
    pitch = width * 3 if strides is None else int(strides[0])
    if strides is not None and (int(strides[1]) != 3 or int(strides[2]) != 1):
        raise ValueError(
            f"{what} has strides {tuple(strides)}; pixels must be 3 contiguous bytes "
            "(only the row pitch may differ); make it contiguous first"
        )
    if height < 1 or width < 1:
        raise ValueError(f"{what} is empty (shape {tuple(shape)}); every sample needs pixels")
    return SourceView(ptr=ptr, height=height, width=width, pitch=pitch,
                      stream=_stream_of(iface, what))


def source_views(sources) -> list[SourceView]:
    """Describe the batch's source images: a sequence of CUDA arrays (HWC uint8, e.g. a DALI
    TensorListGPU or a list of CuPy/torch arrays) or one dense [B, H, W, 3] CUDA array."""
    iface = getattr(sources, "__cuda_array_interface__", None)
    if iface is not None:  # one dense batch
        shape, strides = iface["shape"], iface.get("strides")
        if len(shape) != 4:
            raise ValueError(
                f"a dense source batch must have shape (B, H, W, 3), got {tuple(shape)}"
            )
        batch_stride = int(np.prod(shape[1:])) if strides is None else int(strides[0])
        base = int(iface["data"][0])
        return [
            _source_view(iface, base + b * batch_stride, shape[1:],
                         None if strides is None else strides[1:], f"source sample {b}")
            for b in range(shape[0])
        ]
    views = []
    for b in range(len(sources)):
        item = _interface(sources[b], f"source sample {b}")
        views.append(_source_view(item, int(item["data"][0]), item["shape"],
                                  item.get("strides"), f"source sample {b}"))
    return views


def pending_streams(views: list[SourceView], launch_stream: int) -> list[int]:
    """The streams, other than `launch_stream`, that the sources were written on: the kernel's
    stream waits for each before reading them."""
    found: list[int] = []
    for view in views:
        if view.stream is not None and view.stream != launch_stream and view.stream not in found:
            found.append(view.stream)
    return found


def output_view(out, layout: str) -> OutputView:
    """Check the preallocated output tensor against the layout and describe it."""
    check_layout(layout)
    iface = _interface(out, "the output")
    shape, strides = tuple(int(s) for s in iface["shape"]), iface.get("strides")
    dtype = np.dtype(output_dtype(np.dtype(iface["typestr"]), "the output's dtype"))
    height, width = image_size_of(shape, layout, "the output")
    contiguous = tuple(int(np.prod(shape[i + 1:])) * dtype.itemsize for i in range(4))
    if strides is not None and tuple(int(s) for s in strides) != contiguous:
        raise ValueError(f"the output must be C-contiguous; got strides {tuple(strides)}")
    return OutputView(ptr=int(iface["data"][0]), batch=shape[0], height=height, width=width,
                      dtype=dtype, layout=layout)


def kernel_name(dtype, layout: str) -> str:
    """The extern "C" entry point of resize_normalize.cu for this output type and layout."""
    suffix = _KERNEL_DTYPES[output_dtype(dtype)]
    return f"chute_resize_normalize_{suffix}_{check_layout(layout).lower()}"


def launch_grid(out: OutputView) -> tuple[int, int, int]:
    """Grid of BLOCK-sized blocks covering (x, y, sample)."""
    if out.batch > _MAX_GRID_Z:
        raise ValueError(f"batch {out.batch} exceeds the {_MAX_GRID_Z} samples of one launch")
    return (-(-out.width // BLOCK[0]), -(-out.height // BLOCK[1]), out.batch)


def _checked_boxes(boxes, views: list[SourceView]) -> np.ndarray:
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.shape != (len(views), 4):
        raise ValueError(f"boxes must have shape ({len(views)}, 4), got {boxes.shape}")
    limits = np.array([[v.height, v.width] for v in views], dtype=np.float64).reshape(-1, 2)
    bad = boxes_outside(boxes, limits, BOX_SLACK)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"box {boxes[b].tolist()} (y0, x0, h, w) of sample {b} does not lie inside its "
            f"{views[b].height}x{views[b].width} source with a positive size; boxes are in the "
            "pixel units of the array given as source"
        )
    return boxes.astype(np.float32)


def pack_args(views: list[SourceView], boxes, flips, mean, std) -> PackedArgs:
    """Pack pointers, shapes, boxes, flips and normalisation into one aligned byte buffer."""
    n = len(views)
    flips = np.asarray(flips, dtype=bool).reshape(-1)
    if flips.shape != (n,):
        raise ValueError(f"flips must have {n} entries, got {flips.shape[0]}")
    mean255, std255 = scaled_mean_std(mean, std)
    parts = [
        ("srcs", np.array([v.ptr for v in views], dtype=np.uint64)),
        ("boxes", _checked_boxes(boxes, views)),
        # The same float32 constants as the CPU fallback (chute._normalization).
        ("norm", np.concatenate([mean255, std255])),
        ("shapes", np.array([[v.height, v.width, v.pitch] for v in views], dtype=np.int32)),
        ("flips", flips.astype(np.uint8)),
    ]
    offsets, chunks, size = {}, [], 0
    for name, arr in parts:  # 8-byte alignment first, then 4, then 1: no padding needed
        offsets[name] = size
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        chunks.append(raw)
        size += raw.size
    return PackedArgs(buffer=np.concatenate(chunks), **offsets)


@dataclass(frozen=True)
class ViewsPlan:
    """One launch of the multi-crop views kernel: the packed arguments (offsets of srcs, outs,
    boxes, norm, shapes, views and flips in `buffer`), the grid and the entry point."""

    buffer: np.ndarray  # uint8
    offsets: dict[str, int]
    grid: tuple[int, int, int]
    kernel: str
    num_views: int


def views_kernel_name(dtype, layout: str) -> str:
    """The extern "C" entry point of the views kernel for this output type and layout."""
    return kernel_name(dtype, layout).replace("resize_normalize_", "resize_normalize_views_", 1)


def views_plan(views: list[SourceView], boxes, flips, outs: list[OutputView], mean,
               std) -> ViewsPlan:
    """Pack one views launch: V outputs (one dtype and layout, any sizes) of B sources.

    Args:
        views: the B decoded sources.
        boxes: [B, V, 4] (y0, x0, height, width) in each source's pixel units.
        flips: [B, V] bools.
        outs: the V output batches, each of B images.
        mean, std: per-channel normalisation, fractions of 255.
    """
    n, v = len(views), len(outs)
    if v == 0:
        raise ValueError("the views kernel needs at least one output (one per view)")
    if len({(o.dtype, o.layout) for o in outs}) != 1:
        raise ValueError("every view's output must share one dtype and layout, got "
                         f"{sorted({(str(o.dtype), o.layout) for o in outs})}")
    bad = [k for k, o in enumerate(outs) if o.batch != n]
    if bad:
        raise ValueError(f"{n} source images but view {bad[0]}'s output holds "
                         f"{outs[bad[0]].batch}")
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.shape != (n, v, 4):
        raise ValueError(f"boxes must have shape ({n}, {v}, 4), got {boxes.shape}")
    flips = np.asarray(flips, dtype=bool)
    if flips.shape != (n, v):
        raise ValueError(f"flips must have shape ({n}, {v}), got {flips.shape}")
    if n > _MAX_GRID_Y:
        raise ValueError(f"batch {n} exceeds the {_MAX_GRID_Y} samples of one views launch")
    # every (sample, view) box checked against its source, as pack_args checks one view
    checked = _checked_boxes(boxes.reshape(n * v, 4), [s for s in views for _ in range(v)])
    table = np.zeros((v, 4), dtype=np.int64)  # (out_h, out_w, blocks_x, first_block)
    first = 0
    for k, o in enumerate(outs):
        bx, by = -(-o.width // BLOCK[0]), -(-o.height // BLOCK[1])
        table[k] = (o.height, o.width, bx, first)
        first += bx * by
    if first > _MAX_GRID_X:
        raise ValueError(f"the views' outputs need {first} blocks per sample, more than one "
                         f"launch holds ({_MAX_GRID_X})")
    mean255, std255 = scaled_mean_std(mean, std)
    parts = [  # 8-byte aligned first, then 4, then 1: no padding needed
        ("srcs", np.array([s.ptr for s in views], dtype=np.uint64)),
        ("outs", np.array([o.ptr for o in outs], dtype=np.uint64)),
        ("boxes", checked),
        ("norm", np.concatenate([mean255, std255])),
        ("shapes", np.array([[s.height, s.width, s.pitch] for s in views], dtype=np.int32)),
        ("views", table.astype(np.int32)),
        ("flips", flips.astype(np.uint8)),
    ]
    offsets, chunks, size = {}, [], 0
    for name, arr in parts:
        offsets[name] = size
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        chunks.append(raw)
        size += raw.size
    return ViewsPlan(buffer=np.concatenate(chunks), offsets=offsets, grid=(max(first, 1), n, 1),
                     kernel=views_kernel_name(outs[0].dtype, outs[0].layout), num_views=v)


def union_windows(boxes, image_sizes, out_sizes) -> tuple[np.ndarray, np.ndarray]:
    """One decode window per sample that serves all its views, and every view's box inside it.

    Each view's window is `roi_windows`' (the box plus the resample's margin for that view's
    output size); the sample's window is their bounding box, so every view reads exactly the
    pixels a decode of the full image gives it (docs/views.md).

    Args:
        boxes: [B, V, 4] (top, left, height, width) in full-image pixels.
        image_sizes: [B, 2] (height, width) of the full images.
        out_sizes: [V, 2] (out_h, out_w) of every view.

    Returns:
        (windows [B, 4] int32 (top, left, height, width), inner [B, V, 4] float32 boxes
        relative to their sample's window).
    """
    boxes = np.asarray(boxes, dtype=np.float64)
    n, v = boxes.shape[:2]
    tops = np.empty((n, v), dtype=np.int64)
    lefts, bottoms, rights = np.empty_like(tops), np.empty_like(tops), np.empty_like(tops)
    for k in range(v):
        win, _ = roi_windows(boxes[:, k], image_sizes, tuple(out_sizes[k]))
        win = win.astype(np.int64)
        tops[:, k], lefts[:, k] = win[:, 0], win[:, 1]
        bottoms[:, k], rights[:, k] = win[:, 0] + win[:, 2], win[:, 1] + win[:, 3]
    top, left = tops.min(axis=1), lefts.min(axis=1)
    windows = np.stack([top, left, bottoms.max(axis=1) - top, rights.max(axis=1) - left], axis=1)
    inner = boxes.copy()
    inner[:, :, 0] -= top[:, None]
    inner[:, :, 1] -= left[:, None]
    return windows.astype(np.int32), inner.astype(np.float32)


def roi_windows(boxes, image_sizes, out_size) -> tuple[np.ndarray, np.ndarray]:
    """The decode windows of a ROI decode that feeds the resample, and the boxes inside them.

    The shared box geometry (`chute._resize_box.decode_windows`, the CPU decoder's rule): each
    window is the box widened by ceil(max(box / out, 1)) + 2 pixels per side, clamped to the
    image (docs/design.md, "Resize definition").

    Args:
        boxes: [B, 4] (top, left, height, width) in full-image pixels, fractions allowed.
        image_sizes: [B, 2] (height, width) of the full images.
        out_size: (out_h, out_w) of the resample.

    Returns:
        (windows [B, 4] int32 (top, left, height, width), inner [B, 4] float32 boxes relative to
        their window).
    """
    return decode_windows(boxes, image_sizes, out_size)
