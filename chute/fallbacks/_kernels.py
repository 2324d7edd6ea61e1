"""The jitted batch functions: header pass (plan) and decode + fused resample pass.

Both are `prange` loops over samples. Each thread uses its own TurboJPEG handle, ROI decoder
and scratch rows, indexed by `numba.get_thread_id()`. Sample status codes written here: 0 ok,
the DecodeStatus failures, or NEEDS_PIL / JPEG_WARNING for payloads the slow path must look at.

With ROI decoders (roi_handles non-empty) a JPEG is decoded only over its crop plus a margin:
the resample taps (ceil(support) pixels) and one more pixel, because fancy upsampling makes a
region's edge pixels differ from the full frame's; pixels the resample reads then equal the
full-frame decode's. A payload without its end-of-image marker (truncated) and any payload the
ROI decoder rejects take the full-frame path, so failures are classified as they would be
without ROI decoding.
"""

from __future__ import annotations

import numpy as np
from numba import get_thread_id, njit, prange

from chute._resize_box import BOX_SLACK, decode_span
from chute.fallbacks._resample import resample_into
from chute.fallbacks._roi_library import ROI_OK, ROI_WARNING, roi_decode
from chute.fallbacks._status import (
    BOX_OUTSIDE,
    CORRUPT,
    JPEG_WARNING,
    NEEDS_PIL,
    OK,
    SIZE_MISMATCH,
    TOO_LARGE,
)
from chute.fallbacks._turbojpeg import (
    TJCS_CMYK,
    TJCS_YCCK,
    TJPF_CMYK,
    TJPF_RGB,
    tj_decompress2,
    tj_decompress_header3,
    tj_destroy,
    tj_get_error_code,
    tj_init_decompress,
)

__all__ = ["plan_batch", "decode_views_batch", "PLAN_COLUMNS"]

# Columns of the int64 plan array [B, PLAN_COLUMNS].
P_STATUS, P_SCALE, P_HEIGHT, P_WIDTH, P_FORMAT = range(5)
PLAN_COLUMNS = 5
_DCT_SCALES = (8, 4, 2)


@njit(inline="always", nogil=True)
def _renew_handle(handles, t):
    """Replace thread t's handle after a failure (0 if allocation fails: later calls fail)."""
    tj_destroy(handles[t])
    handles[t] = tj_init_decompress()


@njit(parallel=True, nogil=True, cache=True)
def plan_batch(data, offsets, boxes, sizes, max_pixels, out_h, out_w, dct_headroom, handles,
               header, plan):
    """Read each JPEG header; refuse it when it claims more than max_pixels or a size other
    than sizes[i] (height, width; sizes empty: any); choose the DCT scale; check the box fits.

    dct_headroom: the largest DCT scale s (8, 4, 2) with box >= dct_headroom * s * out on both
    axes is used; 0 decodes at full size.
    """
    base = data.ctypes.data
    hptr = header.ctypes.data
    for i in prange(boxes.shape[0]):
        t = get_thread_id()
        start = offsets[i]
        size = offsets[i + 1] - start
        plan[i, P_STATUS] = OK
        plan[i, P_SCALE] = 1
        if size < 4 or data[start] != 0xFF or data[start + 1] != 0xD8 or data[start + 2] != 0xFF:
            plan[i, P_STATUS] = NEEDS_PIL  # not a JPEG: PNG, WebP, ...
            continue
        h = hptr + i * 16
        if tj_decompress_header3(handles[t], base + start, size, h, h + 4, h + 8, h + 12) != 0:
            plan[i, P_STATUS] = CORRUPT
            _renew_handle(handles, t)
            continue
        width = np.int64(header[i, 0])
        height = np.int64(header[i, 1])
        if width < 1 or height < 1:  # header data ended early (libjpeg only warned)
            plan[i, P_STATUS] = CORRUPT
            _renew_handle(handles, t)
            continue
        # Before anything of the header's size is allocated (a decompression bomb).
        if width * height > max_pixels:
            plan[i, P_STATUS] = TOO_LARGE
            continue
        if sizes.shape[0] and (height != sizes[i, 0] or width != sizes[i, 1]):
            plan[i, P_STATUS] = SIZE_MISMATCH
            continue
        top, left, box_h, box_w = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        # Written so that NaN fails too (chute._resize_box.boxes_outside's rule).
        if not (top >= -BOX_SLACK and left >= -BOX_SLACK and box_h > 0 and box_w > 0
                and top + box_h <= height + BOX_SLACK and left + box_w <= width + BOX_SLACK):
            plan[i, P_STATUS] = BOX_OUTSIDE
            continue
        scale = 1
        if dct_headroom > 0:
            for s in _DCT_SCALES:
                if box_h >= dct_headroom * s * out_h and box_w >= dct_headroom * s * out_w:
                    scale = s
                    break
        plan[i, P_SCALE] = scale
        # TJSCALED: libjpeg's scaled size is the ceiling of size / scale.
        plan[i, P_HEIGHT] = (height + scale - 1) // scale
        plan[i, P_WIDTH] = (width + scale - 1) // scale
        cmyk = header[i, 3] == TJCS_CMYK or header[i, 3] == TJCS_YCCK
        plan[i, P_FORMAT] = TJPF_CMYK if cmyk else TJPF_RGB


@njit(inline="always", nogil=True)
def _cmyk_to_rgb_inplace(buf, pixels):
    """Adobe (inverted) CMYK -> RGB as PIL converts it, in place (RGB is written behind)."""
    for p in range(pixels):
        c = np.int32(buf[4 * p])
        m = np.int32(buf[4 * p + 1])
        y = np.int32(buf[4 * p + 2])
        k = np.int32(buf[4 * p + 3])
        for ch, v in enumerate((c, m, y)):
            t = (255 - v) * k + 128
            buf[3 * p + ch] = np.uint8(k - (((t >> 8) + t) >> 8))


@njit(inline="always", nogil=True)
def _ends_with_eoi(data, start, stop):
    """Whether the payload ends with the JPEG end-of-image marker (zero padding allowed)."""
    while stop - start > 2 and data[stop - 1] == 0:
        stop -= 1
    return stop - start >= 4 and data[stop - 2] == 0xFF and data[stop - 1] == 0xD9


# The shared box geometry's span (docs/design.md, "Resize definition"), jitted here.
_span = njit(inline="always", nogil=True)(decode_span)


@njit(parallel=True, nogil=True, cache=True)
def decode_views_batch(data, offsets, boxes, flips, plan, handles, roi_handles, geometry,
                       scratch, rows, flags, roi_flags, outs, kind, nchw, mean255, std255):
    """Decode every planned JPEG once and resample each of its views into outs[v][i].

    boxes: float64 [B, V, 4] and flips bool [B, V], in full-image pixels; outs: a tuple of V
    output batches (each its own size, one dtype and layout). With ROI decoders the decoded
    region is the union of every view's span (each view's span with its margin lies inside it,
    so every view reads the pixels of a full decode). Slots of failed samples are zero-filled
    in every view.
    """
    base = data.ctypes.data
    views = boxes.shape[1]
    use_roi = roi_handles.shape[0] > 0
    for i in prange(boxes.shape[0]):
        if plan[i, P_STATUS] != OK:
            for v in range(views):
                outs[v][i] = 0
            continue
        t = get_thread_id()
        src = scratch[t]
        start = offsets[i]
        size = offsets[i + 1] - start
        height = plan[i, P_HEIGHT]
        width = plan[i, P_WIDTH]
        s = np.float64(plan[i, P_SCALE])
        if use_roi and _ends_with_eoi(data, start, start + size):
            y0, y1, x0, x1 = height, np.int64(0), width, np.int64(0)
            for v in range(views):
                out = outs[v]
                out_h = out.shape[2] if nchw else out.shape[1]
                out_w = out.shape[3] if nchw else out.shape[2]
                a, b = _span(boxes[i, v, 0] / s, boxes[i, v, 2] / s, out_h, height)
                c, d = _span(boxes[i, v, 1] / s, boxes[i, v, 3] / s, out_w, width)
                y0, y1, x0, x1 = min(y0, a), max(y1, b), min(x0, c), max(x1, d)
            g = geometry[t]
            code = roi_decode(roi_handles[t], base + start, size, plan[i, P_SCALE], y0, y1, x0,
                              x1, src.ctypes.data, src.shape[0], roi_flags, g.ctypes.data)
            if code == ROI_OK:
                region_w = np.int64(g[1])
                region_h = np.int64(y1 - y0)
                if g[2] == 4:
                    _cmyk_to_rgb_inplace(src, region_h * region_w)
                for v in range(views):
                    resample_into(src, region_h, region_w, boxes[i, v, 0] / s - y0,
                                  boxes[i, v, 1] / s - g[0], boxes[i, v, 2] / s,
                                  boxes[i, v, 3] / s, flips[i, v], outs[v], i, kind, nchw,
                                  mean255, std255, rows[t])
                continue
            if code == ROI_WARNING:
                plan[i, P_STATUS] = JPEG_WARNING
                for v in range(views):
                    outs[v][i] = 0
                continue
            # Rejected: the full-frame decode below classifies the failure.
        pixel_format = plan[i, P_FORMAT]
        status = tj_decompress2(handles[t], base + start, size,
                                src.ctypes.data, width, 0, height, pixel_format, flags)
        if status != 0:
            plan[i, P_STATUS] = JPEG_WARNING if tj_get_error_code(handles[t]) == 0 else CORRUPT
            _renew_handle(handles, t)
            for v in range(views):
                outs[v][i] = 0
            continue
        if pixel_format == TJPF_CMYK:
            _cmyk_to_rgb_inplace(src, height * width)
        for v in range(views):
            resample_into(src, height, width, boxes[i, v, 0] / s, boxes[i, v, 1] / s,
                          boxes[i, v, 2] / s, boxes[i, v, 3] / s, flips[i, v], outs[v], i,
                          kind, nchw, mean255, std255, rows[t])
