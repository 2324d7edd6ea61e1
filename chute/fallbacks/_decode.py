"""decode_batch: the CPU path's public entry.

Holds the per-process resources of the jitted kernels: one TurboJPEG handle, one ROI decoder
and one scratch buffer per Numba thread, re-created after a fork (handles are per process) and
grown, never shrunk, as larger images arrive (no large per-batch allocation in steady state;
the resample still allocates its small per-sample tap tables).

Numba's GNU-OpenMP threading layer aborts any child forked after a parallel call, so unless
NUMBA_THREADING_LAYER says otherwise chute asks Numba for a fork-safe layer ("forksafe": TBB
when installed, else the built-in workqueue). Calls are serialised by a lock, which the
workqueue layer (not thread-safe) needs anyway, and so do the shared per-thread buffers; a
forked child gets that lock free and its own resources (chute/_fork.py).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from numpy.typing import ArrayLike

from chute._fork import ProcessLock, on_fork_in_child
from chute._normalization import IMAGENET_MEAN, IMAGENET_STD, scaled_mean_std
from chute._output_types import Layout, check_layout, image_size_of, output_dtype
from chute._resize_box import BOX_SLACK, boxes_outside
from chute.errors import BackendUnavailableError
from chute.fallbacks import _roi_library, _turbojpeg
from chute.fallbacks._kernels import (
    P_HEIGHT,
    P_SCALE,
    P_STATUS,
    P_WIDTH,
    PLAN_COLUMNS,
    decode_views_batch,
    plan_batch,
)
from chute.fallbacks._limits import max_image_pixels
from chute.fallbacks._resample import KIND_FLOAT16, KIND_FLOAT32, KIND_UINT8
from chute.fallbacks._slow_path import decode_warned_jpeg, decode_with_pil, resample_decoded
from chute.fallbacks._status import BOX_OUTSIDE, JPEG_WARNING, NEEDS_PIL, OK

__all__ = ["decode_batch", "decode_views", "release_scratch", "IMAGENET_MEAN", "IMAGENET_STD"]

# DCT-domain downscaling by s is used when the crop is at least DCT_HEADROOM * s times the
# output. libjpeg's scaled IDCT filters unlike the antialiased bilinear resize, so a larger
# headroom is closer to the exact result and slower (docs/design.md, "Resize definition";
# benchmarks/bench_fidelity.py measures the error).
DCT_HEADROOM = 1.0

# The resample kernel's output kind of each output dtype name.
_KINDS = {"uint8": KIND_UINT8, "float16": KIND_FLOAT16, "float32": KIND_FLOAT32}


@dataclass
class _Resources:
    pid: int
    handles: np.ndarray  # int64 [threads]: tjhandle per Numba thread
    roi_handles: np.ndarray  # int64 [threads] ROI decoders, empty when unavailable
    geometry: np.ndarray  # int32 [threads, GEOMETRY_FIELDS]: the ROI decoder's reports
    scratch: np.ndarray  # uint8 [threads, bytes]: decoded pixels
    rows: np.ndarray  # float32 [threads, values]: one intermediate row


if "NUMBA_THREADING_LAYER" not in os.environ:
    # Takes effect only if no parallel Numba function has run yet in this process.
    numba.config.THREADING_LAYER = "forksafe"  # type: ignore[attr-defined]  # set at run time

# free again in a forked child, and a fork waits for the parallel kernels it guards
_lock = ProcessLock(fork_waits=True)
_resources: _Resources | None = None


@on_fork_in_child
def _forget_resources() -> None:
    # The parent's handles and scratch are its own (docs/design.md, "Processes and threads").
    global _resources
    _resources = None


def _acquire(scratch_bytes: int, row_values: int) -> _Resources:
    """This process's handles and scratch, at least as large as asked. Call with _lock held."""
    global _resources
    threads = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set at run time
    res = _resources
    if res is None or res.pid != os.getpid():
        # After a fork the parent's handles are not ours to use or destroy: start afresh.
        lib = _turbojpeg.load()
        res = _Resources(os.getpid(), _turbojpeg.create_handles(lib, threads),
                         _roi_library.create_roi_handles(threads),
                         np.zeros((threads, _roi_library.GEOMETRY_FIELDS), np.int32),
                         np.empty((threads, 0), np.uint8), np.empty((threads, 0), np.float32))
        _resources = res
    if res.scratch.shape[1] < scratch_bytes:
        res.scratch = np.empty((threads, int(scratch_bytes * 1.25) + 4096), np.uint8)
    if res.rows.shape[1] < row_values:
        res.rows = np.empty((threads, int(row_values * 1.25) + 64), np.float32)
    return res


def release_scratch() -> None:
    """Free the decoded-pixel scratch of this process (it grows to the largest image decoded
    and is otherwise kept for the next batch); the next call allocates what it needs."""
    with _lock:
        res = _resources
        if res is not None:
            res.scratch = np.empty((res.scratch.shape[0], 0), np.uint8)
            res.rows = np.empty((res.rows.shape[0], 0), np.float32)


def _check_sizes(sizes, n: int) -> np.ndarray:
    """sizes as int64 [B, 2] (empty [0, 2] for None)."""
    if sizes is None:
        return np.zeros((0, 2), np.int64)
    checked = np.ascontiguousarray(sizes, dtype=np.int64)
    if checked.shape != (n, 2):
        raise ValueError(f"sizes must be [B, 2] (height, width per image), got shape "
                         f"{checked.shape} for B={n}")
    return checked


def _check_arguments(data: np.ndarray, offsets: np.ndarray, boxes: np.ndarray,
                     flips: np.ndarray, out: np.ndarray, layout: str) -> int:
    """Raise ValueError naming the first bad argument; the output kind when all are good."""
    n = len(boxes)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ValueError(f"data must be a 1-D uint8 array (Dataset.gather), got {data.dtype} "
                         f"{data.shape}")
    if offsets.shape != (n + 1,) or (n and (offsets[0] < 0 or offsets[-1] > len(data)
                                           or np.any(np.diff(offsets) < 0))):
        raise ValueError(f"offsets must be {n + 1} non-decreasing positions inside data "
                         f"(Dataset.gather), got shape {offsets.shape}")
    if boxes.shape != (n, 4) or flips.shape != (n,):
        raise ValueError(f"boxes must be [B, 4] and flips [B], got {boxes.shape} and "
                         f"{flips.shape}")
    check_layout(layout)
    kind = _KINDS[output_dtype(out.dtype, "out")]
    image_size_of(out.shape, layout, "out")
    if out.shape[0] != n or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {layout} batch of B={n} images, got "
                         f"shape {out.shape}{'' if out.flags.c_contiguous else ', strided'}")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    return kind


_warned_no_roi = False


def _roi_handles(res: _Resources, roi_decode: bool | None) -> np.ndarray:
    """The ROI decoders to use for this call (empty: full frames), per `roi_decode`."""
    global _warned_no_roi
    if roi_decode is not None and not roi_decode:
        return res.roi_handles[:0]
    if res.roi_handles.shape[0]:
        return res.roi_handles
    reason = _roi_library.roi_decoder_status().reason
    if roi_decode:
        raise BackendUnavailableError(reason)
    if not _warned_no_roi:
        _warned_no_roi = True
        warnings.warn(f"chute decodes whole JPEG frames, not just each crop (slower): {reason}",
                      RuntimeWarning, stacklevel=3)
    return res.roi_handles


def decode_batch(
    data: ArrayLike,
    offsets: ArrayLike,
    boxes: ArrayLike,
    flips: ArrayLike,
    out: np.ndarray,
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    layout: Layout = "NCHW",
    dct_scaling: bool = True,
    roi_decode: bool | None = None,
    threads: int | None = None,
    fast_dct: bool = False,
    sizes: ArrayLike | None = None,
    max_pixels: int | None = None,
) -> np.ndarray:
    """Decode, crop, resize, flip and normalize a batch of encoded images into `out`.

    Float outputs are (v - 255*mean) / (255*std) of the resampled values v; uint8 outputs are
    v rounded half up (mean/std unused). The resize is the one every backend shares
    (docs/design.md, "Resize definition").

    Args:
        data: uint8 [N], the B payloads back to back (what Dataset.gather returns).
        offsets: int [B + 1]; payload k is data[offsets[k]:offsets[k + 1]].
        boxes: [B, 4], each crop's (top, left, height, width) in full-image pixels; floats
            are fractional boxes (PIL's `resize(box=...)` convention: pixel j covers
            [j, j + 1)). A box must have a positive size and lie inside its image.
        flips: bool [B]; True mirrors that sample horizontally.
        out: preallocated, C-contiguous, writeable uint8, float16 or float32 array,
            [B, 3, H, W] for "NCHW" or [B, H, W, 3] for "NHWC".
        mean, std: per-channel RGB normalisation in [0, 1] units (None: ImageNet's).
        layout: "NCHW" or "NHWC", the layout of `out`.
        dct_scaling: let libjpeg-turbo decode at 1/2, 1/4 or 1/8 size when the crop stays at
            least the output size.
        roi_decode: decode only each crop's region (plus the resample's margin; the same
            pixels as a full decode). None uses it when the ROI decoder could be built here
            and warns once otherwise; True requires it; False decodes whole frames.
        threads: at most this many Numba threads for this call (None: all).
        fast_dct: trade a little accuracy for decode speed (TJFLAG_FASTDCT).
        sizes: int [B, 2], the (height, width) each image must have (a dataset's columns);
            an image whose header says otherwise fails with SIZE_MISMATCH before it is
            decoded. None: any size.
        max_pixels: the most pixels (height x width) an image's header may claim; larger
            ones fail with TOO_LARGE before anything of their size is allocated (decompression
            bombs). None: CHUTE_MAX_IMAGE_PIXELS, else 178,956,970 (Pillow's bound). Non-JPEG
            images above that bound fail as CORRUPT (Pillow refuses them first) whatever
            this says.

    Returns:
        uint8 [B]: 0 where the sample was decoded, else its DecodeStatus; failed slots of
        `out` are zero-filled.

    Raises:
        ValueError: an argument has the wrong type, shape or value (the message names it).
        BackendUnavailableError: roi_decode=True and the ROI decoder cannot be built here.
    """
    data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    boxes = np.ascontiguousarray(boxes, dtype=np.float64)
    flips = np.ascontiguousarray(flips, dtype=np.bool_)
    _check_arguments(data, offsets, boxes, flips, out, layout)  # its messages name [B, 4]
    # One implementation: a batch is one view of each image (docs/design.md, "Resize
    # definition"); decode_views' DCT scale and box checks for one view are this function's.
    return decode_views(data, offsets, boxes[:, None, :], flips[:, None], [out], mean=mean,
                        std=std, layout=layout, dct_scaling=dct_scaling, roi_decode=roi_decode,
                        threads=threads, fast_dct=fast_dct, sizes=sizes, max_pixels=max_pixels)


def decode_views(
    data: ArrayLike,
    offsets: ArrayLike,
    boxes: ArrayLike,
    flips: ArrayLike,
    outs: Sequence[np.ndarray],
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    layout: Layout = "NCHW",
    dct_scaling: bool = True,
    roi_decode: bool | None = None,
    threads: int | None = None,
    fast_dct: bool = False,
    sizes: ArrayLike | None = None,
    max_pixels: int | None = None,
) -> np.ndarray:
    """Decode each encoded image once and crop, resize, flip and normalise V views of it, view
    v into `outs[v]` (multi-crop; docs/views.md).

    Every view equals what `decode_batch` gives for that view's box and flip alone when both
    decode at full size (`dct_scaling=False`, or crops too small for DCT scaling): the pixels
    a view's resample reads are those of a full decode, whatever region is decoded. With
    `dct_scaling`, an image is decoded at the largest DCT scale every one of its views allows
    (the one the view with the least headroom allows), so a large view may be resampled from a
    finer decode than it would get alone.

    Args:
        data: uint8 [N], the B payloads back to back (what Dataset.gather returns).
        offsets: int [B + 1]; payload k is data[offsets[k]:offsets[k + 1]].
        boxes: [B, V, 4], every view's (top, left, height, width) in full-image pixels.
        flips: bool [B, V]; True mirrors that view horizontally.
        outs: V preallocated, C-contiguous, writeable batches of B images, one dtype (uint8,
            float16 or float32) and `layout`, each view its own size.
        mean, std, layout, dct_scaling, roi_decode, threads, fast_dct, sizes, max_pixels: as
            `decode_batch` takes them.

    Returns:
        uint8 [B]: 0 where the sample was decoded, else its DecodeStatus (a box of any view
        outside its image fails the sample); failed samples are zero-filled in every view.

    Raises:
        ValueError: an argument has the wrong type, shape or value (the message names it).
        BackendUnavailableError: roi_decode=True and the ROI decoder cannot be built here.
    """
    data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    boxes = np.ascontiguousarray(boxes, dtype=np.float64)
    flips = np.ascontiguousarray(flips, dtype=np.bool_)
    outs = list(outs)
    if boxes.ndim != 3 or boxes.shape[1:] != (len(outs), 4) or flips.shape != boxes.shape[:2]:
        raise ValueError(f"boxes must be [B, V, 4] and flips [B, V] for V={len(outs)} outputs, "
                         f"got {boxes.shape} and {flips.shape}")
    if not outs:
        raise ValueError("outs must hold at least one output batch (one per view)")
    n = boxes.shape[0]
    kinds = {_check_arguments(data, offsets, boxes[:, v], flips[:, v], out, layout)
             for v, out in enumerate(outs)}
    if len(kinds) != 1 or len({out.dtype for out in outs}) != 1:
        raise ValueError(f"outs must share one dtype, got {sorted({str(o.dtype) for o in outs})}")
    kind = kinds.pop()
    sizes = _check_sizes(sizes, n)
    max_pixels = max_image_pixels(max_pixels)
    mean255, std255 = scaled_mean_std(mean, std)
    nchw = layout == "NCHW"
    out_sizes = np.array([image_size_of(out.shape, layout) for out in outs], dtype=np.float64)
    targets = tuple(out.view(np.uint16) if kind == KIND_FLOAT16 else out for out in outs)
    plan = np.zeros((n, PLAN_COLUMNS), dtype=np.int64)
    header = np.zeros((n, 4), dtype=np.int32)
    flags = _turbojpeg.TJFLAG_FASTDCT if fast_dct else 0
    roi_flags = _roi_library.ROI_FLAG_FASTDCT if fast_dct else 0

    previous = numba.get_num_threads()
    with _lock:
        try:
            if threads is not None:
                most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
                numba.set_num_threads(max(1, min(int(threads), most)))
            res = _acquire(0, 0)
            roi_handles = _roi_handles(res, roi_decode)
            # The header pass at full size (view 0's box checked there), then every view's box
            # and the one DCT scale all views allow.
            first = np.ascontiguousarray(boxes[:, 0])
            plan_batch(data, offsets, first, sizes, max_pixels, int(out_sizes[0, 0]),
                       int(out_sizes[0, 1]), 0.0, res.handles, header, plan)
            _plan_views(plan, header, boxes, out_sizes, DCT_HEADROOM if dct_scaling else 0.0)
            fast = plan[:, 0] == OK
            pixels = plan[fast, 2] * plan[fast, 3]
            bpp = np.where(plan[fast, 4] == _turbojpeg.TJPF_CMYK, 4, 3)
            need = int((pixels * bpp).max()) if fast.any() else 0
            widest = int(plan[fast, 3].max()) * 3 if fast.any() else 0
            res = _acquire(need, widest)
            with numba.parallel_chunksize(1):
                decode_views_batch(data, offsets, boxes, flips, plan, res.handles, roi_handles,
                                   res.geometry, res.scratch, res.rows, flags, roi_flags,
                                   targets, kind, nchw, mean255, std255)
        finally:
            numba.set_num_threads(previous)

    status = plan[:, 0].copy()
    for i in np.flatnonzero((status == NEEDS_PIL) | (status == JPEG_WARNING)):
        payload = data[offsets[i]:offsets[i + 1]]
        if status[i] == NEEDS_PIL:
            expected = tuple(sizes[i]) if len(sizes) else None
            status[i], pixels_rgb = decode_with_pil(payload, expected, max_pixels)
        else:
            status[i], pixels_rgb = decode_warned_jpeg(payload)
        for v, target in enumerate(targets):
            if pixels_rgb is None or status[i] != OK:
                break
            status[i] = resample_decoded(pixels_rgb, boxes[i, v], flips[i, v], target, int(i),
                                         kind, nchw, mean255, std255)
        if status[i] != OK:
            for out in outs:
                out[i] = 0
    return status.astype(np.uint8)


def _plan_views(plan: np.ndarray, header: np.ndarray, boxes: np.ndarray,
                out_sizes: np.ndarray, dct_headroom: float) -> None:
    """Fail samples with a view outside the image; give the others the largest DCT scale
    (8, 4, 2) at which every view's box is at least dct_headroom * scale * its output, and the
    decoded size at that scale."""
    ok = plan[:, P_STATUS] == OK
    full = np.stack([header[:, 1], header[:, 0]], axis=1).astype(np.int64)  # height, width
    for v in range(boxes.shape[1]):
        outside = ok & boxes_outside(boxes[:, v], full, BOX_SLACK)
        plan[outside, P_STATUS] = BOX_OUTSIDE
        ok &= ~outside
    scale = np.ones(len(plan), dtype=np.int64)
    if dct_headroom > 0:
        chosen = np.zeros(len(plan), dtype=bool)
        for s in (8, 4, 2):
            fits = np.all(boxes[:, :, 2:] >= dct_headroom * s * out_sizes[None], axis=(1, 2))
            take = fits & ~chosen
            scale[take] = s
            chosen |= take
    plan[ok, P_SCALE] = scale[ok]
    plan[ok, P_HEIGHT] = -(-full[ok, 0] // scale[ok])
    plan[ok, P_WIDTH] = -(-full[ok, 1] // scale[ok])
