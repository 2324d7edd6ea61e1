"""Preparing one image file for a chute dataset: keep JPEG bytes as they are, read their size from
the header, reject truncated or unreadable files, transcode other formats (and downscale on
request) to JPEG."""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image

__all__ = ["PreparedImage", "UnreadableImage", "prepare_image", "jpeg_is_complete"]

_SOI = b"\xff\xd8"


class UnreadableImage(Exception):
    """The file is not a readable image (the message says why)."""


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    height: int
    width: int
    action: str  # "stored" (bytes unchanged) | "transcoded" | "resized"


def _skip_entropy_data(data: bytes, i: int) -> int:
    """Position of the first marker after the entropy-coded segment starting at `i`, or -1.
    Inside it 0xFF is followed by 0x00 (stuffing) or a restart marker 0xD0-0xD7."""
    n = len(data)
    while True:
        i = data.find(b"\xff", i)
        if i < 0 or i + 1 >= n:
            return -1
        nxt = data[i + 1]
        if nxt == 0x00 or 0xD0 <= nxt <= 0xD7:
            i += 2
        elif nxt == 0xFF:
            i += 1
        else:
            return i


def jpeg_is_complete(data: bytes) -> bool:
    """True when the JPEG's marker structure reaches its EOI marker (walking segment lengths, so
    an EOI inside an embedded EXIF thumbnail does not count)."""
    if not data.startswith(_SOI):
        return False
    n, i = len(data), 2
    while i + 1 < n:
        if data[i] != 0xFF:
            return False
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            return True
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            i += 2
            continue
        if i + 4 > n:
            return False
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            i = _skip_entropy_data(data, i)
            if i < 0:
                return False
    return False


def _decode_check(img: Image.Image) -> None:
    """Decode everything (at 1/8 scale for JPEG, which still reads all coded data)."""
    w, h = img.size
    if img.format == "JPEG":
        img.draft(img.mode, (max(1, w // 8), max(1, h // 8)))
    img.load()


def _encode_jpeg(img: Image.Image, quality: int) -> bytes:
    if img.mode not in ("RGB", "L"):
        img = img.convert("RGBA").convert("RGB") if "transparency" in img.info else \
            img.convert("RGB")
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def prepare_image(raw: bytes, *, max_side: int | None = None, quality: int = 95) -> PreparedImage:
    """Raise UnreadableImage for anything that is not a complete, decodable image."""
    try:
        img = Image.open(io.BytesIO(raw))
        width, height = img.size
        is_jpeg = img.format == "JPEG"
        if is_jpeg and not jpeg_is_complete(raw):
            raise UnreadableImage("truncated JPEG (no end-of-image marker)")
        too_big = max_side is not None and max(width, height) > max_side
        if is_jpeg and not too_big:
            _decode_check(img)
            return PreparedImage(raw, height, width, "stored")
        if too_big:
            img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        else:
            img.load()
        data = _encode_jpeg(img, quality)
    except UnreadableImage:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadableImage(f"{type(exc).__name__}: {exc}") from None
    return PreparedImage(data, img.height, img.width, "resized" if too_big else "transcoded")
