"""Preparing one image file for a chute dataset: keep JPEG bytes as they are, read their size from
the header, reject truncated or unreadable files, transcode other formats (and downscale on
request) to JPEG."""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from chute._pil_rgb import eight_bit
from chute.convert._transcode import TRANSCODE_QUALITY

__all__ = ["PreparedImage", "UnreadableImage", "prepare_image", "jpeg_is_complete", "encode_jpeg"]

_SOI = b"\xff\xd8"
# Start-of-frame markers (0xC4 DHT, 0xC8 JPG and 0xCC DAC share the range but are not frames).
_FRAME_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# The frames the decoders read (libjpeg-turbo's 8-bit DCT decoder, which every backend
# follows): baseline, extended and progressive, Huffman or arithmetic coded. Others (lossless,
# hierarchical) are transcoded when Pillow can decode them.
_DECODABLE_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})
# Pillow opens MPO files (JPEG + more pictures, what many cameras write) as "MPO"; their first
# picture is a JPEG that every decoder reads, and the one Pillow shows.
_JPEG_FORMATS = frozenset({"JPEG", "MPO"})


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


@dataclass(frozen=True)
class _JpegStructure:
    complete: bool  # the marker structure reaches its end-of-image marker
    frame: int | None  # the start-of-frame marker (0xC0 baseline, 0xC2 progressive, ...)
    precision: int | None  # bits per sample the frame header states


def _jpeg_structure(data: bytes) -> _JpegStructure:
    """Walk the marker segments by their lengths (an EOI inside an embedded EXIF thumbnail
    does not count) up to the end-of-image marker."""
    frame = precision = None
    n, i = len(data), 2
    while i + 1 < n:
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            return _JpegStructure(True, frame, precision)
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            i += 2
            continue
        if i + 4 > n:
            break
        if marker in _FRAME_MARKERS and frame is None and i + 4 < n:
            frame, precision = marker, data[i + 4]
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            i = _skip_entropy_data(data, i)
            if i < 0:
                break
    return _JpegStructure(False, frame, precision)


def jpeg_is_complete(data: bytes) -> bool:
    """True when the JPEG's marker structure reaches its EOI marker (walking segment lengths, so
    an EOI inside an embedded EXIF thumbnail does not count)."""
    return data.startswith(_SOI) and _jpeg_structure(data).complete


def _decode_check(img: Image.Image) -> None:
    """Decode everything (at 1/8 scale for JPEG, which still reads all coded data)."""
    w, h = img.size
    if img.format in _JPEG_FORMATS:
        img.draft(img.mode, (max(1, w // 8), max(1, h // 8)))
    img.load()


def _rgb_or_grey(img: Image.Image) -> Image.Image:
    """The image in a mode JPEG stores (RGB or L), converted as torchvision's loader does
    (16-bit grey scaled to 8 bits first, not clipped white)."""
    img = eight_bit(img)
    if img.mode in ("RGB", "L"):
        return img
    return img.convert("RGBA").convert("RGB") if "transparency" in img.info else \
        img.convert("RGB")


def encode_jpeg(img: Image.Image, quality: int = TRANSCODE_QUALITY) -> bytes:
    """A PIL image as a JPEG of RGB (or grey) pixels, without chroma subsampling: colour edges
    keep their resolution, so eval on a transcoded image stays within the fidelity bar of
    torchvision's transform on the original (chute/convert/_transcode.py)."""
    img = _rgb_or_grey(img)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality, subsampling=0)
    return out.getvalue()


def _jpeg_frame_problem(jpeg: _JpegStructure) -> str | None:
    """Why the decoders cannot read this JPEG's frame as stored (None: they can)."""
    if jpeg.precision is not None and jpeg.precision != 8:
        return f"{jpeg.precision}-bit JPEG (the decoders read 8-bit samples)"
    if jpeg.frame is not None and jpeg.frame not in _DECODABLE_FRAMES:
        lossless = jpeg.frame in (0xC3, 0xC7, 0xCB, 0xCF)
        return (f"{'lossless' if lossless else 'hierarchical'} JPEG (frame marker "
                f"0xFF{jpeg.frame:02X}; the decoders read baseline and progressive JPEGs)")
    return None


def _unidentified(raw: bytes, jpeg: _JpegStructure | None) -> UnreadableImage:
    """The reason for a file Pillow does not recognise as an image."""
    if not raw:
        return UnreadableImage("empty file (0 bytes)")
    problem = _jpeg_frame_problem(jpeg) if jpeg is not None else None
    if problem is not None:
        return UnreadableImage(f"{problem} that Pillow cannot decode either; re-encode it as an "
                               "8-bit JPEG or a PNG")
    return UnreadableImage(f"not an image format Pillow can read (the file starts with "
                           f"{raw[:12]!r}); check the file or remove it")


def prepare_image(raw: bytes, *, max_side: int | None = None,
                  quality: int = TRANSCODE_QUALITY) -> PreparedImage:
    """Raise UnreadableImage for anything that is not a complete, decodable image."""
    jpeg = _jpeg_structure(raw) if raw.startswith(_SOI) else None
    try:
        try:
            img: Image.Image = Image.open(io.BytesIO(raw))
        except UnidentifiedImageError:
            raise _unidentified(raw, jpeg) from None
        width, height = img.size
        is_jpeg = img.format in _JPEG_FORMATS
        if is_jpeg and not (jpeg is not None and jpeg.complete):
            raise UnreadableImage("truncated JPEG (no end-of-image marker)")
        # A JPEG the decoders cannot read as stored (lossless, 12-bit) is transcoded like any
        # other format when Pillow decodes it.
        store = is_jpeg and jpeg is not None and _jpeg_frame_problem(jpeg) is None
        too_big = max_side is not None and max(width, height) > max_side
        if store and not too_big:
            _decode_check(img)
            return PreparedImage(raw, height, width, "stored")
        if too_big:
            assert max_side is not None  # too_big says so
            if is_jpeg and not store:
                img.load()  # no DCT-scaled draft: lossless JPEGs have no DCT to scale
            # Pillow resizes only some modes (not 16-bit grey): convert first.
            img = _rgb_or_grey(img)
            img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        else:
            img.load()
        data = encode_jpeg(img, quality)
    except UnreadableImage:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadableImage(f"{type(exc).__name__}: {exc}") from None
    return PreparedImage(data, img.height, img.width, "resized" if too_big else "transcoded")
