"""Test helpers: generated images, packing payloads like Dataset.gather, reference decodes."""

from __future__ import annotations

import ctypes
import io

import numpy as np
from PIL import Image

from chute.fallbacks import turbojpeg_library


def smooth_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """An RGB uint8 image with gradients, texture and some sharp edges (JPEG-friendly)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.stack([
        128 + 100 * np.sin(x / max(width, 1) * 6.3 + seed),
        128 + 100 * np.cos(y / max(height, 1) * 4.1),
        (x + y) / max(height + width, 1) * 255,
    ], axis=-1)
    img += rng.normal(0, 12, img.shape)
    img[height // 3: height // 2, width // 4: width // 2] = (250, 20, 30)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(img: np.ndarray | Image.Image, fmt: str = "JPEG", **kwargs) -> bytes:
    image = img if isinstance(img, Image.Image) else Image.fromarray(img)
    buf = io.BytesIO()
    image.save(buf, fmt, **kwargs)
    return buf.getvalue()


def pack(payloads: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) laid out as Dataset.gather returns them."""
    data = np.frombuffer(b"".join(payloads), dtype=np.uint8).copy()
    offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in payloads])
    return data, offsets


def turbojpeg_rgb(payload: bytes) -> np.ndarray:
    """Full-size RGB decode through plain ctypes calls (independent of chute's kernels)."""
    lib = ctypes.CDLL(turbojpeg_library())
    lib.tjInitDecompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(lib.tjInitDecompress())
    try:
        w, h, sub, cs = (ctypes.c_int() for _ in range(4))
        assert lib.tjDecompressHeader3(handle, payload, ctypes.c_ulong(len(payload)),
                                       ctypes.byref(w), ctypes.byref(h), ctypes.byref(sub),
                                       ctypes.byref(cs)) == 0
        out = np.zeros((h.value, w.value, 3), dtype=np.uint8)
        assert lib.tjDecompress2(handle, payload, ctypes.c_ulong(len(payload)),
                                 out.ctypes.data_as(ctypes.c_void_p), w.value, 0, h.value,
                                 0, 0) == 0
        return out
    finally:
        lib.tjDestroy(handle)


def reference_resize(pixels: np.ndarray, box, out_h: int, out_w: int) -> np.ndarray:
    """Contract #3 in float64 NumPy: float [out_h, out_w, 3] resampled values (no rounding)."""
    top, left, box_h, box_w = (float(v) for v in box)

    def matrix(start, length, out_size, src_size):
        scale = length / out_size
        fs = max(scale, 1.0)
        m = np.zeros((out_size, src_size))
        for o in range(out_size):
            centre = start + (o + 0.5) * scale
            lo = max(int(centre - fs + 0.5), 0)
            hi = min(int(centre + fs + 0.5), src_size)
            j = np.arange(lo, hi)
            w = np.maximum(0.0, 1.0 - np.abs((j + 0.5 - centre) / fs))
            m[o, lo:hi] = w / w.sum()
        return m

    my = matrix(top, box_h, out_h, pixels.shape[0])
    mx = matrix(left, box_w, out_w, pixels.shape[1])
    return np.einsum("yi,ijc,xj->yxc", my, pixels.astype(np.float64), mx)
