"""The header check the GPU readers run before decoding
(chute/pipelines/producers/image/_header.py): the
size it reads equals Pillow's for every JPEG and PNG flavour, unreadable headers are refused,
other formats are left to their decoder."""

import io
import struct

import numpy as np
import pytest
from PIL import Image

from chute.fallbacks import DecodeStatus
from chute.pipelines.producers.image._header import header_size, refused_headers
from chute.pipelines.producers.image._placeholder import (
    PLACEHOLDER_BOX,
    placeholder_payload,
    refusals,
    refused_index,
)
from tests._media import encode, smooth_image
from tests.pipelines.producers.image.test_decompression_bombs import bomb


def _encode(image: Image.Image, fmt: str, **kw) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kw)
    return buffer.getvalue()


def _flavours():
    rgb = Image.fromarray(smooth_image(37, 53))
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010E] = "x" * 3000  # a long APP1 segment before the frame header
    yield "baseline", _encode(rgb, "JPEG")
    yield "progressive", _encode(rgb, "JPEG", progressive=True)
    yield "exif+icc", _encode(rgb, "JPEG", exif=exif.tobytes(), icc_profile=b"\0" * 5000)
    yield "restart", _encode(rgb, "JPEG", restart_marker_blocks=1)
    yield "gray", _encode(rgb.convert("L"), "JPEG")
    yield "cmyk", _encode(rgb.convert("CMYK"), "JPEG")
    yield "png-rgba", _encode(rgb.convert("RGBA"), "PNG")
    yield "png-16bit", _encode(rgb.convert("I;16"), "PNG")


JPEG_FLAVOURS = [(name, payload) for name, payload in _flavours()
                 if payload.startswith(b"\xff\xd8")]


@pytest.mark.parametrize("name,payload", list(_flavours()), ids=[n for n, _ in _flavours()])
def test_the_stated_size_is_pillows(name, payload):
    width, height = Image.open(io.BytesIO(payload)).size
    assert header_size(payload) == (height, width)
    assert header_size(np.frombuffer(payload, np.uint8)) == (height, width)


def test_fill_bytes_before_a_marker_are_skipped():
    payload = bomb(300, 200)
    at = payload.find(b"\xff\xc0")
    padded = payload[:at] + b"\xff\xff\xff" + payload[at:]
    assert header_size(padded) == (300, 200)


@pytest.mark.parametrize("cut", [3, 5, 20])
def test_a_truncated_or_damaged_header_is_unreadable(cut):
    payload = bomb(16, 16)
    with pytest.raises(ValueError, match="unreadable image header"):
        header_size(payload[:cut])
    at = payload.find(b"\xff\xc0")
    no_frame = payload[:at] + b"\xff\xda" + payload[at + 2:]  # a scan before any frame header
    with pytest.raises(ValueError, match="no frame header"):
        header_size(no_frame)
    zero = bytearray(payload)
    zero[at + 5:at + 9] = struct.pack(">HH", 0, 16)
    with pytest.raises(ValueError, match="frame size 0 x 16"):
        header_size(bytes(zero))


def test_other_formats_are_not_checked_here():
    assert header_size(_encode(Image.fromarray(smooth_image(8, 8)), "BMP")) is None
    assert header_size(b"not an image") is None


def test_refusals_use_the_cpu_decoders_codes():
    payloads = [bomb(24, 32), bomb(30000, 30000), bomb(48, 64), bomb(24, 32)[:7], b"GIF89a.."]
    sizes = np.array([[24, 32]] * 5)
    status = refused_headers(payloads, sizes, max_pixels=178_956_970)
    assert [DecodeStatus(int(s)) for s in status] == [
        DecodeStatus.OK, DecodeStatus.TOO_LARGE, DecodeStatus.SIZE_MISMATCH,
        DecodeStatus.CORRUPT, DecodeStatus.OK]
    assert refused_headers(payloads[:1], sizes[:1], max_pixels=24 * 32 - 1)[0] == \
        DecodeStatus.TOO_LARGE


def test_refused_ids_travel_with_their_status():
    index = np.array([7, refused_index(123456789, 5), 0, refused_index(0, 1)])
    ids, status = refusals(index)
    assert ids.tolist() == [7, 123456789, 0, 0]
    assert status.tolist() == [0, 5, 0, 1]
    with pytest.raises(ValueError):
        refused_index(3, 0)
    placeholder = Image.open(io.BytesIO(placeholder_payload().tobytes()))
    assert placeholder.size == PLACEHOLDER_BOX[2:]


def test_a_second_frame_header_is_refused_not_skipped():
    # libjpeg refuses two SOF markers and nvImageCodec's parser reports the last: a bomb's SOF
    # after the real one must not pass as 24 x 32 (found in review)
    payload = bomb(24, 32)
    at = payload.find(b"\xff\xc0")
    length = struct.unpack_from(">H", payload, at + 2)[0]
    second = bytearray(payload[at:at + 2 + length])
    second[5:9] = struct.pack(">HH", 30000, 30000)
    doubled = payload[:at + 2 + length] + bytes(second) + payload[at + 2 + length:]
    with pytest.raises(ValueError, match="two frame headers"):
        header_size(doubled)
    status = refused_headers([doubled], np.array([[24, 32]]), max_pixels=178_956_970)
    assert status[0] == DecodeStatus.CORRUPT


def test_soi_without_a_marker_is_unreadable_as_on_the_cpu():
    payload = b"\xff\xd8\x00" + bomb(24, 32)[3:]
    assert header_size(payload) is None
    status = refused_headers([payload], np.array([[24, 32]]), max_pixels=178_956_970)
    assert status[0] == DecodeStatus.UNREADABLE


@pytest.mark.parametrize("name, payload", JPEG_FLAVOURS, ids=[n for n, _ in JPEG_FLAVOURS])
def test_a_jpeg_cut_short_is_refused_as_the_cpu_decoder_refuses_it(name, payload):
    # nvJPEG decodes a truncated JPEG without an error (the missing rows grey): the first GPU
    # run found the GPU readers passing it as a sample where the CPU decoder refuses it
    # (PNG is left out: its decoder checks its chunks)
    sizes = np.array([Image.open(io.BytesIO(payload)).size[::-1]] * 4)
    scan = payload.find(b"\xff\xda")
    whole, padded, trailing = payload, payload + b"\0" * 64, payload + b"\xff\xd8 trailing bytes"
    cut = payload[:scan + (len(payload) - scan) // 2]
    status = refused_headers([whole, padded, trailing, cut], sizes, max_pixels=178_956_970)
    assert [DecodeStatus(int(s)) for s in status] == [DecodeStatus.OK] * 3 + [
        DecodeStatus.CORRUPT]


def test_an_end_marker_inside_an_exif_thumbnail_does_not_pass_a_cut_image():
    thumb = encode(smooth_image(16, 16))  # has its own 0xFFD9
    exif = Image.Exif()
    exif[0x010E] = "x"
    main = encode(smooth_image(40, 48), exif=exif.tobytes())
    at = main.find(b"\xff\xe1")  # the EXIF segment, before the frame header: the thumbnail in it
    length = struct.unpack_from(">H", main, at + 2)[0]
    segment = main[at + 4:at + 2 + length] + thumb
    payload = main[:at] + b"\xff\xe1" + struct.pack(">H", len(segment) + 2) + segment + \
        main[at + 2 + length:]
    assert Image.open(io.BytesIO(payload)).size == (48, 40)
    cut = payload[:len(payload) - 40]
    status = refused_headers([payload, cut], np.array([[40, 48]] * 2), max_pixels=178_956_970)
    assert status.tolist() == [DecodeStatus.OK, DecodeStatus.CORRUPT]


def test_header_checks_tell_subsampled_chroma_from_the_frame_header():
    # nvJPEG before 13.2 refuses ROI decodes of subsampled JPEGs only: the nvimgcodec backend
    # decodes those whole and the others by their windows
    from chute.pipelines.producers.image._header import header_checks

    rgb = Image.fromarray(smooth_image(37, 53))
    payloads = [encode(rgb, subsampling=s) for s in ("4:4:4", "4:2:2", "4:2:0")]
    payloads += [encode(rgb, mode="L"), encode(rgb, "PNG"),
                 encode(rgb, subsampling="4:2:0", progressive=True)]
    status, subsampled = header_checks(payloads, np.array([[37, 53]] * 6), 178_956_970)
    assert status.tolist() == [0] * 6
    assert subsampled.tolist() == [False, True, True, False, False, True]
