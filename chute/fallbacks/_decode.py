"""decode_batch: the CPU path's public entry (DESIGN contract #4).

Holds the per-process resources of the jitted kernels: one TurboJPEG handle, one ROI decoder
and one scratch buffer per Numba thread, re-created after a fork (handles are per process) and
grown, never shrunk, as larger images arrive (no large per-batch allocation in steady state;
the resample still allocates its small per-sample tap tables).

Numba's GNU-OpenMP threading layer aborts any child forked after a parallel call, so unless
NUMBA_THREADING_LAYER says otherwise chute asks Numba for a fork-safe layer ("forksafe": TBB
when installed, else the built-in workqueue). Calls are serialised by a lock, which the
workqueue layer (not thread-safe) needs anyway, and so do the shared per-thread buffers.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD, scaled_mean_std
from chute.errors import BackendUnavailableError
from chute.fallbacks import _roi_library, _turbojpeg
from chute.fallbacks._kernels import PLAN_COLUMNS, decode_resample_batch, plan_batch
from chute.fallbacks._resample import KIND_FLOAT16, KIND_FLOAT32, KIND_UINT8
from chute.fallbacks._slow_path import decode_warned_jpeg, decode_with_pil, resample_decoded
from chute.fallbacks._status import JPEG_WARNING, NEEDS_PIL, OK

__all__ = ["decode_batch", "IMAGENET_MEAN", "IMAGENET_STD"]

_KINDS = {np.dtype(np.uint8): KIND_UINT8, np.dtype(np.float32): KIND_FLOAT32,
          np.dtype(np.float16): KIND_FLOAT16}


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
    numba.config.THREADING_LAYER = "forksafe"

_lock = threading.Lock()
_resources: _Resources | None = None


def _acquire(scratch_bytes: int, row_values: int) -> _Resources:
    """This process's handles and scratch, at least as large as asked. Call with _lock held."""
    global _resources
    threads = numba.config.NUMBA_NUM_THREADS
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


def _check_arguments(data, offsets, boxes, flips, out, layout):
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
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if out.dtype not in _KINDS:
        raise ValueError(f"out must be uint8, float16 or float32, got {out.dtype}")
    channels = out.shape[1] if layout == "NCHW" else out.shape[-1]
    if out.ndim != 4 or out.shape[0] != n or channels != 3 or not out.flags.c_contiguous:
        shape = "[B, 3, H, W]" if layout == "NCHW" else "[B, H, W, 3]"
        raise ValueError(f"out must be a C-contiguous {shape} array with B={n} for layout "
                         f"{layout}, got shape {out.shape}")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")


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


def decode_batch(data, offsets, boxes, flips, out, *, mean=None, std=None, layout="NCHW",
                 dct_scaling=True, roi_decode=None, threads=None, fast_dct=False) -> np.ndarray:
    """Decode, crop, resize, flip and normalize a batch of encoded images into `out`.

    data/offsets: the payloads back to back, payload k = data[offsets[k]:offsets[k+1]] (what
    Dataset.gather returns). boxes int32 [B, 4] (top, left, height, width) in full-image pixels,
    flips bool [B]. out: preallocated uint8, float16 or float32 array, [B, 3, H, W] for "NCHW"
    or [B, H, W, 3] for "NHWC". Float outputs are (v - 255*mean) / (255*std); uint8 outputs
    are the rounded resampled values (mean/std unused). dct_scaling lets libjpeg-turbo decode at
    1/2, 1/4 or 1/8 size when the crop stays at least the output size. roi_decode decodes only
    each crop's region (plus the resample's margin; same pixels as a full decode): None uses it
    when the ROI decoder could be built here and warns once otherwise, True requires it
    (BackendUnavailableError saying why not), False decodes full frames. fast_dct trades a little
    accuracy for decode speed (TJFLAG_FASTDCT); threads bounds the Numba threads of this call.

    Returns status uint8 [B]: 0 ok, else a DecodeStatus; failed slots are zero-filled.
    """
    data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    boxes = np.ascontiguousarray(boxes, dtype=np.int64)
    flips = np.ascontiguousarray(flips, dtype=np.bool_)
    _check_arguments(data, offsets, boxes, flips, out, layout)
    kind = _KINDS[out.dtype]
    mean255, std255 = scaled_mean_std(mean, std)
    nchw = layout == "NCHW"
    out_h, out_w = (out.shape[2], out.shape[3]) if nchw else (out.shape[1], out.shape[2])
    target = out.view(np.uint16) if kind == KIND_FLOAT16 else out
    n = len(boxes)
    plan = np.zeros((n, PLAN_COLUMNS), dtype=np.int64)
    header = np.zeros((n, 4), dtype=np.int32)
    flags = _turbojpeg.TJFLAG_FASTDCT if fast_dct else 0
    roi_flags = _roi_library.ROI_FLAG_FASTDCT if fast_dct else 0

    previous = numba.get_num_threads()
    with _lock:
        try:
            if threads is not None:
                numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
            res = _acquire(0, 0)
            roi_handles = _roi_handles(res, roi_decode)
            plan_batch(data, offsets, boxes, out_h, out_w, bool(dct_scaling), res.handles,
                       header, plan)
            fast = plan[:, 0] == OK
            pixels = plan[fast, 2] * plan[fast, 3]
            bpp = np.where(plan[fast, 4] == _turbojpeg.TJPF_CMYK, 4, 3)
            need = int((pixels * bpp).max()) if fast.any() else 0
            widest = int(plan[fast, 3].max()) * 3 if fast.any() else 0
            res = _acquire(need, widest)
            # Dynamic scheduling, one sample at a time: decode times vary by image size.
            with numba.parallel_chunksize(1):
                decode_resample_batch(data, offsets, boxes, flips, plan, res.handles,
                                      roi_handles, res.geometry, res.scratch, res.rows, flags,
                                      roi_flags, target, kind, nchw, mean255, std255)
        finally:
            numba.set_num_threads(previous)

    status = plan[:, 0].copy()
    for i in np.flatnonzero((status == NEEDS_PIL) | (status == JPEG_WARNING)):
        decode = decode_with_pil if status[i] == NEEDS_PIL else decode_warned_jpeg
        status[i], pixels_rgb = decode(data[offsets[i]:offsets[i + 1]])
        if pixels_rgb is not None:
            status[i] = resample_decoded(pixels_rgb, boxes[i], flips[i], target, int(i), kind,
                                         nchw, mean255, std255)
        if status[i] != OK:
            out[i] = 0
    return status.astype(np.uint8)
