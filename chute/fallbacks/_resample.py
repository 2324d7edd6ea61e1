"""Crop + antialiased bilinear resize + flip + normalize + layout, fused, for one sample.

The resize is the shared one (docs/design.md, "Resize definition"; PIL's BILINEAR with a
box): for output column ox, scale = box_w / OW, fs = max(scale, 1), centre = x0 + (ox + 0.5) *
scale, taps j in [max(int(centre - fs + 0.5), 0), min(int(centre + fs + 0.5), src_w)), weights
max(0, 1 - |(j + 0.5 - centre) / fs|) normalised to sum 1; rows likewise.

Arithmetic is float32 without intermediate rounding, so the two separable passes commute up to
float rounding; they run vertical first here because that pass is one weight per source row
over a contiguous span (SIMD-friendly) and needs only one row of intermediate values.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from chute.fallbacks._fp16 import float32_to_half_bits

__all__ = ["axis_taps", "resample_into", "KIND_UINT8", "KIND_FLOAT32", "KIND_FLOAT16"]

# Output kinds: float16 outputs are written as their bits through a uint16 view.
KIND_UINT8 = 0
KIND_FLOAT32 = 1
KIND_FLOAT16 = 2


@njit(nogil=True, cache=True)
def axis_taps(start, length, out_size, src_size):
    """Tap positions and weights of one axis, padded to a fixed count K per output.

    Returns (first int64[out_size], weights float32[out_size, K]): output o reads source
    samples first[o] .. first[o] + K - 1, all inside [0, src_size), zero weights as padding.
    """
    scale = length / out_size
    fs = max(scale, 1.0)
    lo = np.empty(out_size, dtype=np.int64)
    hi = np.empty(out_size, dtype=np.int64)
    taps = 1
    for o in range(out_size):
        centre = start + (o + 0.5) * scale
        lo[o] = max(int(centre - fs + 0.5), 0)
        hi[o] = max(min(int(centre + fs + 0.5), src_size), lo[o] + 1)
        taps = max(taps, hi[o] - lo[o])
    taps = min(taps, src_size)
    first = np.empty(out_size, dtype=np.int64)
    weights = np.zeros((out_size, taps), dtype=np.float32)
    exact = np.empty(taps, dtype=np.float64)
    for o in range(out_size):
        centre = start + (o + 0.5) * scale
        # Shift windows that would run past the end left; their extra taps weigh zero.
        base = min(lo[o], src_size - taps)
        total = 0.0
        for k in range(taps):
            j = base + k
            w = 0.0
            if lo[o] <= j < hi[o]:
                w = max(0.0, 1.0 - abs((j + 0.5 - centre) / fs))
            exact[k] = w
            total += w
        if total <= 0.0:
            # Degenerate (only for sub-pixel boxes at the border): nearest source sample.
            exact[:] = 0.0
            exact[min(max(int(centre), base), base + taps - 1) - base] = 1.0
            total = 1.0
        for k in range(taps):
            weights[o, k] = np.float32(exact[k] / total)
        first[o] = base
    return first, weights


@njit(nogil=True, inline="always")
def _horizontal_taps(span_row, offsets, weights, kx, flip, result, pitch, plane):
    """The horizontal pass for kx taps per output (see _horizontal).

    Indices are uint64 because Numba wraps negative signed indices, a compare and select per
    load that costs more than the arithmetic of this scalar loop.
    """
    out_w = offsets.shape[0]
    for ox in range(out_w):
        o = np.uint64(offsets[ox])
        r = np.float32(0.0)
        g = np.float32(0.0)
        bl = np.float32(0.0)
        for k in range(kx):
            w = weights[ox, k]
            r += w * span_row[o]
            g += w * span_row[o + np.uint64(1)]
            bl += w * span_row[o + np.uint64(2)]
            o += np.uint64(3)
        dest = np.uint64((out_w - 1 - ox if flip else ox) * pitch)
        result[dest] = r
        result[dest + np.uint64(plane)] = g
        result[dest + np.uint64(2 * plane)] = bl


@njit(nogil=True)
def _horizontal(span_row, offsets, weights, flip, result, pitch, plane):
    """Horizontal pass: sum_k weights[ox, k] * span_row[offsets[ox] + 3k + c] for channel c
    goes to result[dest * pitch + c * plane], dest = ox (out_w - 1 - ox if flip).

    pitch 1, plane out_w: planar rows (NCHW); pitch 3, plane 1: an interleaved row (NHWC).
    Common tap counts get their own copy with a constant count, so LLVM unrolls the tap
    loop: the loop overhead otherwise costs about as much as the arithmetic.
    """
    kx = weights.shape[1]
    if kx == 2:
        _horizontal_taps(span_row, offsets, weights, 2, flip, result, pitch, plane)
    elif kx == 3:
        _horizontal_taps(span_row, offsets, weights, 3, flip, result, pitch, plane)
    elif kx == 4:
        _horizontal_taps(span_row, offsets, weights, 4, flip, result, pitch, plane)
    elif kx == 5:
        _horizontal_taps(span_row, offsets, weights, 5, flip, result, pitch, plane)
    elif kx == 6:
        _horizontal_taps(span_row, offsets, weights, 6, flip, result, pitch, plane)
    else:
        _horizontal_taps(span_row, offsets, weights, kx, flip, result, pitch, plane)


@njit(nogil=True)
def _convert(values, dest, kind, mean, std):
    """dest[x] = values[x] as the output dtype: rounded uint8, or normalized float16/float32.

    For one contiguous NCHW channel row; the dtype branch sits outside the pixel loops so
    each loop vectorises.
    """
    if kind == KIND_UINT8:
        for x in range(values.shape[0]):
            q = np.floor(values[x] + np.float32(0.5))
            dest[x] = min(max(q, np.float32(0.0)), np.float32(255.0))
    elif kind == KIND_FLOAT16:
        for x in range(values.shape[0]):
            dest[x] = float32_to_half_bits((values[x] - mean) / std)
    else:
        for x in range(values.shape[0]):
            dest[x] = (values[x] - mean) / std


@njit(nogil=True)
def _convert_interleaved(values, dest, kind, mean, std):
    """_convert for an interleaved RGB row: values[3x + c] uses channel c's mean and std.

    Writes a whole (flattened) NHWC row in one contiguous pass instead of three strided
    per-channel passes.
    """
    if kind == KIND_UINT8:
        for x in range(values.shape[0]):
            q = np.floor(values[x] + np.float32(0.5))
            dest[x] = min(max(q, np.float32(0.0)), np.float32(255.0))
    else:
        for x in range(values.shape[0] // 3):
            for c in range(3):
                v = (values[3 * x + c] - mean[c]) / std[c]
                if kind == KIND_FLOAT16:
                    dest[3 * x + c] = float32_to_half_bits(v)
                else:
                    dest[3 * x + c] = v


@njit(nogil=True, cache=True)
def resample_into(src, src_h, src_w, y0, x0, box_h, box_w, flip, out, b, kind, nchw,
                  mean255, std255, row):
    """Resample the box (floats, source pixels) of an interleaved RGB uint8 image into out[b].

    src: flat uint8 buffer holding src_h rows of src_w * 3 bytes; row: float32 scratch of at
    least src_w * 3 values. out is a C-contiguous [B, 3, H, W] (nchw) or [B, H, W, 3]; its
    dtype matches kind.
    """
    if nchw:
        out_h, out_w = out.shape[2], out.shape[3]
    else:
        out_h, out_w = out.shape[1], out.shape[2]
    fy, wy = axis_taps(y0, box_h, out_h, src_h)
    fx, wx = axis_taps(x0, box_w, out_w, src_w)
    ky = wy.shape[1]
    kx = wx.shape[1]
    # Columns any output reads: one contiguous span of the interleaved row.
    col0 = fx[0] * 3
    span = (fx[out_w - 1] + kx) * 3 - col0
    pitch = src_w * 3
    span_row = row[:span]
    offsets = fx * 3 - col0  # where each output's taps start in span_row
    planar = np.empty(3 * out_w, dtype=np.float32)
    for oy in range(out_h):
        # Vertical pass over the span: a weighted sum of ky source rows. (Slices, not signed
        # indices: Numba's negative-index wraparound would stop LLVM from vectorising.)
        base = (fy[oy] * pitch) + col0
        source = src[base:base + span]
        w = wy[oy, 0]
        for i in range(span):
            span_row[i] = w * np.float32(source[i])
        for k in range(1, ky):
            w = wy[oy, k]
            if w != 0.0:
                source = src[base + k * pitch:base + k * pitch + span]
                for i in range(span):
                    span_row[i] += w * np.float32(source[i])
        # Horizontal pass + flip + normalize + layout.
        if nchw:
            _horizontal(span_row, offsets, wx, flip, planar, 1, out_w)
            for c in range(3):
                _convert(planar[c * out_w:(c + 1) * out_w], out[b, c, oy], kind, mean255[c],
                         std255[c])
        else:
            _horizontal(span_row, offsets, wx, flip, planar, 3, 1)
            _convert_interleaved(planar, out[b, oy].reshape(-1), kind, mean255, std255)
