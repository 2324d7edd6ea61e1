"""Colour spaces, progressive JPEGs, non-JPEG payloads and broken data."""

import io

import numpy as np
import pytest
from PIL import Image

from chute.fallbacks import DecodeStatus, decode_batch
from tests._media import encode, misplaced_restart_marker, smooth_image, truncated
from tests._reference_resize import resample, round_uint8
from tests.fallbacks._images import pack

H, W = 45, 61
FULL = (0, 0, H, W)


def _identity(payloads, boxes=None, out_hw=(H, W), fill=77):
    """Decode at scale 1 (box = whole image, output = image size): the decoded pixels."""
    data, offsets = pack(payloads)
    boxes = np.asarray(boxes if boxes is not None else [FULL] * len(payloads), np.int32)
    out = np.full((len(payloads), *out_hw, 3), fill, dtype=np.uint8)
    status = decode_batch(data, offsets, boxes, np.zeros(len(payloads), bool), out,
                          layout="NHWC", dct_scaling=False)
    return status, out


def _close(a, b, mae=1.0, worst=8):
    diff = np.abs(a.astype(int) - b.astype(int))
    assert diff.mean() <= mae and diff.max() <= worst, (diff.mean(), diff.max())


def test_grayscale_jpeg_comes_out_as_rgb():
    gray = smooth_image(H, W)[..., 0]
    payload = encode(gray, quality=90)
    status, out = _identity([payload])
    assert status.tolist() == [0]
    assert (out[0, ..., 0] == out[0, ..., 1]).all() and (out[0, ..., 0] == out[0, ..., 2]).all()
    _close(out[0, ..., 0], np.asarray(Image.open(io.BytesIO(payload))))


def test_cmyk_jpeg_comes_out_as_rgb_like_pil():
    payload = encode(smooth_image(H, W, seed=2), mode="CMYK", quality=95)
    status, out = _identity([payload])
    assert status.tolist() == [0]
    pil_rgb = np.asarray(Image.open(io.BytesIO(payload)).convert("RGB"))
    _close(out[0], pil_rgb)


def test_progressive_and_subsampled_jpegs():
    img = smooth_image(H, W, seed=4)
    for kwargs in ({"progressive": True}, {"subsampling": 0}, {"subsampling": 1},
                   {"subsampling": 2, "optimize": True}):
        payload = encode(img, quality=95, **kwargs)
        status, out = _identity([payload])
        assert status.tolist() == [0], kwargs
        _close(out[0], img, mae=12.0, worst=255)  # lossy (noisy image): a loose sanity check
        pil = np.asarray(Image.open(io.BytesIO(payload)).convert("RGB"))
        _close(out[0], pil, mae=1.0, worst=12)  # same JPEG, possibly another libjpeg build


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "WEBP"])
def test_non_jpeg_payloads_take_the_pil_path_with_the_same_arithmetic(fmt):
    img = smooth_image(H, W, seed=6)
    payload = encode(img, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    box = (3, 5, 30, 40)
    status, out = _identity([payload], [box], out_hw=(20, 17))
    assert status.tolist() == [0]
    expected = round_uint8(resample(img, box, 20, 17))
    assert np.abs(out[0].astype(int) - expected).max() <= 1


def test_rgba_and_palette_pngs_become_rgb():
    img = smooth_image(H, W, seed=7)
    rgba = np.dstack([img, np.full((H, W), 200, np.uint8)])
    palette = Image.fromarray(img).convert("P")
    status, out = _identity([encode(rgba, "PNG"), encode(palette, "PNG")])
    assert status.tolist() == [0, 0]
    assert np.array_equal(out[0], img)
    assert np.array_equal(out[1], np.asarray(palette.convert("RGB")))


def test_a_16_bit_grey_png_is_scaled_to_8_bits_not_clipped_white():
    # Pillow's convert("RGB") clips 16-bit grey at 255: this image came out all white
    grey = (smooth_image(H, W, seed=9)[..., 0].astype(np.uint16) * 257 + 100)
    png = io.BytesIO()
    Image.fromarray(grey).save(png, "PNG")
    status, out = _identity([png.getvalue()])
    assert status.tolist() == [0]
    for channel in range(3):
        assert np.array_equal(out[0, ..., channel], (grey >> 8).astype(np.uint8))


def test_a_32_bit_grey_tiff_is_not_read_as_16_bit():
    # mode "I" is 16-bit only from a PNG (older Pillow releases open 16-bit PNGs so); a 32-bit
    # TIFF of 8-bit values came out black (value >> 8), torchvision's convert("RGB") keeps them
    from chute._pil_rgb import eight_bit

    grey = smooth_image(H, W, seed=10)[..., 0].astype(np.int32)
    tiff = io.BytesIO()
    Image.fromarray(grey, "I").save(tiff, "TIFF")
    assert Image.open(io.BytesIO(tiff.getvalue())).mode == "I"
    status, out = _identity([tiff.getvalue()])
    assert status.tolist() == [0]
    for channel in range(3):
        assert np.array_equal(out[0, ..., channel], grey.astype(np.uint8))
    png_i = Image.fromarray(grey * 257, "I")
    png_i.format = "PNG"  # as such a Pillow opens a 16-bit PNG
    assert np.array_equal(np.asarray(eight_bit(png_i)), grey.astype(np.uint8))


def _broken_payloads():
    good = encode(smooth_image(H, W, seed=8), quality=90)
    bad_header = bytearray(good)
    bad_header[2:40] = b"\xff" * 38
    return {
        "truncated": truncated(good),
        "truncated_header": good[:40],
        "corrupt_scan": misplaced_restart_marker(good),
        "corrupt_header": bytes(bad_header),
        "garbage": bytes(np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8)),
        "jpeg_magic_only": b"\xff\xd8\xff",
        "empty": b"",
        "truncated_png": encode(smooth_image(H, W), "PNG")[:300],
    }


@pytest.mark.parametrize("name", sorted(_broken_payloads()))
def test_broken_payloads_fail_with_a_zeroed_slot(name):
    payload = _broken_payloads()[name]
    good = encode(smooth_image(H, W, seed=9), quality=90)
    status, out = _identity([good, payload, good])
    assert status[0] == 0 and status[2] == 0
    assert status[1] in (DecodeStatus.CORRUPT, DecodeStatus.UNREADABLE)
    assert not out[1].any(), "the failed slot must be zero-filled"
    assert np.array_equal(out[0], out[2])


def test_stray_bytes_before_the_end_marker_are_accepted():
    # Common in real datasets; libjpeg warns but every pixel is intact.
    good = encode(smooth_image(H, W, seed=10), quality=90)
    assert good.endswith(b"\xff\xd9")
    padded = good[:-2] + b"\x00" * 17 + b"\xff\xd9"
    status, out = _identity([good, padded])
    assert status.tolist() == [0, 0]
    assert np.abs(out[0].astype(int) - out[1].astype(int)).max() <= 8  # PIL's own libjpeg


def test_box_outside_the_image_fails_without_reading_out_of_bounds():
    payload = encode(smooth_image(H, W), quality=90)
    png = encode(smooth_image(H, W), "PNG")
    boxes = [(0, 0, H + 1, W), (0, 1, H, W), (-1, 0, 10, 10), (0, 0, 0, 5), (5, 5, 10, 10)]
    for data in (payload, png):
        status, out = _identity([data] * 5, boxes, out_hw=(8, 8))
        assert status.tolist() == [DecodeStatus.BOX_OUTSIDE] * 4 + [0]
        assert not out[:4].any() and out[4].any()


def test_float_slots_of_failures_are_zero_too():
    good = encode(smooth_image(H, W), quality=90)
    data, offsets = pack([good, b"not an image"])
    out = np.full((2, 3, 8, 8), np.nan, dtype=np.float16)
    status = decode_batch(data, offsets, np.array([FULL, FULL], np.int32), np.zeros(2, bool),
                          out)
    assert status.tolist() == [0, DecodeStatus.UNREADABLE]
    assert np.isfinite(out[0]).all() and (out[1] == 0).all()
