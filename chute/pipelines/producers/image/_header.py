"""Image headers checked before a GPU decoder sees the bytes (docs/design.md, "Decompression
bombs"): a JPEG's SOF or a PNG's IHDR is read in Python, and a payload whose header claims more
than `max_pixels` pixels, or a size other than the dataset's height/width columns, or whose
header cannot be read, is refused by the status codes the CPU decoder uses. So is a JPEG with
no end-of-image marker after its first scan (truncated): nvJPEG decodes such a file without an
error, the missing rows grey, where libjpeg warns and the CPU decoder refuses it (the first GPU
run found it). Other formats are not checked here (their decoder reads them).
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["header_size", "refused_headers", "header_checks"]

_PNG = b"\x89PNG\r\n\x1a\n"
# SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM, RST0..RST7 (and SOI, handled as the start).
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])


class _Unreadable(Exception):
    pass


def header_size(payload) -> tuple[int, int] | None:
    """(height, width) a JPEG or PNG header states; None for another format.

    A JPEG's header is read up to its first scan (a second frame header is an error, as in
    libjpeg).

    Args:
        payload: the encoded bytes (bytes, memoryview or a uint8 array).

    Raises:
        ValueError: the payload starts like a JPEG or PNG but its header cannot be read.
    """
    stated = _header(payload)
    return None if stated is None else stated[0]


def _header(payload) -> tuple[tuple[int, int], int | None, bool] | None:
    """((height, width), offset of a JPEG's first scan or None for a PNG, whether a JPEG's
    chroma is subsampled), None for another format; ValueError as header_size."""
    data = memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload
    try:
        if data[:3] == b"\xff\xd8\xff":
            return _jpeg_size(data)
        if data[:8] == _PNG:
            return _png_size(data), None, False
    except (_Unreadable, struct.error, IndexError) as exc:
        raise ValueError(f"unreadable image header ({exc or 'truncated'})") from None
    return None


def _ends_after(payload, scan_at: int) -> bool:
    """Whether a JPEG has its end-of-image marker after the scan starting at `scan_at`: in
    entropy-coded data 0xFF is followed by 0x00 or RSTn, so 0xFFD9 there is the marker (an
    EXIF thumbnail's comes before the scan). Most files end with it; bytes after it are
    allowed, as libjpeg allows them."""
    data = np.frombuffer(payload, dtype=np.uint8)
    if len(data) - 2 > scan_at and data[-2] == 0xFF and data[-1] == 0xD9:
        return True  # no copy, no search: the common case
    blob = payload if isinstance(payload, bytes) else data.tobytes()
    return blob.rfind(b"\xff\xd9", scan_at) >= 0


def _jpeg_size(data) -> tuple[tuple[int, int], int, bool]:
    # Walks to the scan: libjpeg refuses a second frame header, and nvImageCodec's parser
    # reports the last one, so a later SOF must not go unseen.
    at, end, size, subsampled = 2, len(data), None, False
    while at < end:
        if data[at] != 0xFF:
            raise _Unreadable(f"no marker at byte {at}")
        while at < end and data[at] == 0xFF:  # fill bytes may precede a marker
            at += 1
        marker = data[at]
        at += 1
        if marker in _STANDALONE:
            continue
        if marker == 0xDA and size is not None:  # the first scan: the header is complete
            return size, at, subsampled
        if marker in (0xD9, 0xDA):  # end of image, or a scan, before any frame header
            raise _Unreadable("no frame header before the image data")
        (length,) = struct.unpack_from(">H", data, at)
        if length < 2:
            raise _Unreadable(f"segment length {length} at byte {at}")
        if marker in _SOF:
            if size is not None:
                raise _Unreadable("two frame headers")
            height, width = struct.unpack_from(">HH", data, at + 3)
            if height < 1 or width < 1:
                raise _Unreadable(f"frame size {height} x {width}")
            size = (height, width)
            # components' sampling factors (H << 4 | V): unequal ones mean subsampled chroma
            count = data[at + 7]
            factors = {data[at + 9 + 3 * c] for c in range(count)}
            subsampled = len(factors) > 1
        at += length
    raise _Unreadable("the header ends before the image data")


def _png_size(data) -> tuple[int, int]:
    if bytes(data[12:16]) != b"IHDR":
        raise _Unreadable("no IHDR chunk first")
    width, height = struct.unpack_from(">II", data, 16)
    if height < 1 or width < 1:
        raise _Unreadable(f"image size {height} x {width}")
    return height, width


def refused_headers(payloads, sizes: np.ndarray, max_pixels: int) -> np.ndarray:
    """Per payload 0, or the DecodeStatus code that refuses it before decoding.

    Args:
        payloads: the batch's encoded images.
        sizes: [B, 2] (height, width) columns the headers must state.
        max_pixels: the most pixels a header may claim (`chute.fallbacks.max_image_pixels`).
    """
    return header_checks(payloads, sizes, max_pixels)[0]


def header_checks(payloads, sizes: np.ndarray,
                  max_pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """(status, subsampled): `refused_headers`' status, and per payload whether it is a JPEG
    with subsampled chroma (what nvJPEG before 13.2 does not ROI-decode), from one reading of
    each header.

    Args:
        payloads: the batch's encoded images.
        sizes: [B, 2] (height, width) columns the headers must state.
        max_pixels: the most pixels a header may claim (`chute.fallbacks.max_image_pixels`).
    """
    from chute.fallbacks import DecodeStatus

    status = np.zeros(len(payloads), dtype=np.uint8)
    subsampled = np.zeros(len(payloads), dtype=bool)
    for i, payload in enumerate(payloads):
        try:
            stated = _header(payload)
        except ValueError:
            status[i] = DecodeStatus.CORRUPT
            continue
        if stated is None:
            # SOI without a marker after it: the GPU decoders take it for a JPEG, the CPU
            # decoder for nothing it can read
            if bytes(payload[:2]) == b"\xff\xd8":
                status[i] = DecodeStatus.UNREADABLE
            continue
        (height, width), scan_at, subsampled[i] = stated
        if height * width > max_pixels:  # first, as the CPU decoder does
            status[i] = DecodeStatus.TOO_LARGE
        elif height != int(sizes[i, 0]) or width != int(sizes[i, 1]):
            status[i] = DecodeStatus.SIZE_MISMATCH
        elif scan_at is not None and not _ends_after(payload, scan_at):
            status[i] = DecodeStatus.CORRUPT  # truncated: no end-of-image marker
    return status, subsampled
