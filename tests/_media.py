"""Generated test media: images of given sizes, their JPEG (or PNG, WebP, ...) encodings in
any colour mode or subsampling, and damaged payloads (truncated, misplaced markers, an undefined
quantisation table)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

__all__ = [
    "smooth_image",
    "noise_image",
    "encode",
    "jpeg",
    "truncated",
    "misplaced_restart_marker",
    "undefined_quant_table",
]


def smooth_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """RGB uint8 [height, width, 3]: gradients, texture and one sharp-edged patch, so flat areas
    and edges both occur (and JPEG compresses it like a photo).

    Args:
        height, width: image size (1x1 works).
        seed: varies the phase and the texture.
    """
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


def noise_image(height: int, width: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Uniform random uint8 [height, width, channels]: the worst case for a codec (large
    payloads), for tests where only sizes and bytes matter.

    Args:
        height, width: image size.
        seed: the random seed.
        channels: 3 (RGB) or 4 (RGBA).
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, channels), dtype=np.uint8)


def encode(image: np.ndarray | Image.Image, fmt: str = "JPEG", *, mode: str | None = None,
           **options: Any) -> bytes:
    """The encoded bytes of an image.

    Args:
        image: uint8 pixels ([H, W] grey, [H, W, 3] RGB, [H, W, 4] RGBA) or a PIL image.
        fmt: a PIL format name: "JPEG", "PNG", "WEBP", "BMP", ...
        mode: convert to this PIL mode first: "L" (greyscale), "CMYK", "P" (palette), ...
        **options: PIL save options, e.g. quality=90, subsampling=0 (4:4:4), 1 (4:2:2) or
            2 (4:2:0), progressive=True, restart_marker_blocks=3, lossless=True.
    """
    pil = image if isinstance(image, Image.Image) else Image.fromarray(image)
    if mode is not None:
        pil = pil.convert(mode)
    buf = io.BytesIO()
    pil.save(buf, fmt, **options)
    return buf.getvalue()


def jpeg(height: int, width: int, *, seed: int = 0, quality: int = 90, mode: str | None = None,
         **options: Any) -> bytes:
    """A JPEG of `smooth_image(height, width, seed)`.

    Args:
        height, width: image size.
        seed: as for `smooth_image`.
        quality: JPEG quality.
        mode: None (RGB), "L" (greyscale) or "CMYK".
        **options: further PIL JPEG options (subsampling, progressive, ...).
    """
    return encode(smooth_image(height, width, seed), mode=mode, quality=quality, **options)


def truncated(payload: bytes, keep: float = 0.5) -> bytes:
    """The first `keep` fraction of a payload (a file cut short in transfer).

    Args:
        payload: encoded bytes.
        keep: fraction of the bytes kept, 0..1.
    """
    return payload[: int(len(payload) * keep)]


def misplaced_restart_marker(payload: bytes, at: float = 0.5) -> bytes:
    """A JPEG with an RST marker where none may be, at fraction `at` of its bytes: libjpeg
    warns, resynchronises and loses the data after it.

    Args:
        payload: a JPEG's bytes.
        at: where the two marker bytes go, as a fraction of the payload's length.
    """
    damaged = bytearray(payload)
    pos = int(len(payload) * at)
    damaged[pos: pos + 2] = b"\xff\xd3"
    return bytes(damaged)


def undefined_quant_table(payload: bytes) -> bytes:
    """The JPEG with its first component pointing at quantisation table 3, which it does not
    define: its structure is whole, its decode an error in every decoder.

    Args:
        payload: a baseline, extended or progressive JPEG's bytes.
    """
    out, at = bytearray(payload), 2
    while out[at + 1] not in (0xC0, 0xC1, 0xC2):  # segments up to the frame header
        at += 2 + int.from_bytes(out[at + 2:at + 4], "big")
    out[at + 12] = 3  # FF Cx, length, precision, height, width, count, then id, sampling, Tq
    return bytes(out)
