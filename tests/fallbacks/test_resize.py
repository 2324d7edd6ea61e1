"""Resize accuracy of decode_batch against PIL and against the contract's float reference."""

import numpy as np
import pytest
from PIL import Image

from chute.fallbacks import decode_batch
from tests._media import encode, jpeg, smooth_image
from tests._reference_resize import resample, round_uint8
from tests.fallbacks._images import pack, turbojpeg_rgb

# (image h, w), box (top, left, h, w), output (h, w)
CASES = [
    ((37, 53), (0, 0, 37, 53), (19, 23)),  # odd sizes, whole image
    ((37, 53), (5, 7, 29, 31), (29, 31)),  # identity scale, offset box
    ((1, 1), (0, 0, 1, 1), (5, 3)),  # 1x1 source
    ((7, 5), (0, 0, 7, 5), (7, 5)),  # tiny, identity
    ((7, 5), (1, 1, 5, 3), (16, 11)),  # tiny box upscaled
    ((300, 400), (10, 20, 280, 370), (17, 13)),  # > 8x (20x, 28x) downscale
    ((120, 90), (30, 20, 12, 10), (64, 48)),  # upscale ~5x
    ((200, 150), (0, 0, 200, 150), (224, 224)),  # mixed up/down, aspect change
    ((257, 263), (100, 3, 157, 260), (1, 1)),  # 1x1 output
    ((64, 96), (0, 40, 64, 56), (33, 47)),  # box touching right/bottom edges
]


def _decode(payloads, boxes, out_shape, flips=None, **kwargs):
    data, offsets = pack(payloads)
    boxes = np.asarray(boxes, dtype=np.int32).reshape(-1, 4)
    flips = np.zeros(len(boxes), bool) if flips is None else np.asarray(flips)
    out = np.full((len(boxes), *out_shape, 3), 77, dtype=np.uint8)
    status = decode_batch(data, offsets, boxes, flips, out, layout="NHWC", **kwargs)
    return status, out


@pytest.mark.parametrize("size,box,out_size", CASES)
def test_matches_pil_bilinear_on_same_pixels(size, box, out_size):
    payload = jpeg(*size, quality=92)
    pixels = turbojpeg_rgb(payload)
    status, out = _decode([payload], [box], out_size, dct_scaling=False)
    assert status.tolist() == [0]
    top, left, h, w = box
    pil = np.asarray(Image.fromarray(pixels).resize(
        (out_size[1], out_size[0]), Image.BILINEAR, box=(left, top, left + w, top + h)))
    diff = np.abs(out[0].astype(int) - pil.astype(int))
    assert diff.mean() <= 1.0 and diff.max() <= 8, (diff.mean(), diff.max())


@pytest.mark.parametrize("size,box,out_size", CASES)
def test_matches_float_reference_of_the_contract(size, box, out_size):
    payload = jpeg(*size, seed=3, quality=85)
    pixels = turbojpeg_rgb(payload)
    status, out = _decode([payload], [box], out_size, dct_scaling=False)
    assert status.tolist() == [0]
    expected = round_uint8(resample(pixels, box, *out_size))
    # float32 vs float64 accumulation may only flip values sitting on a .5 boundary
    assert np.abs(out[0].astype(int) - expected).max() <= 1


def test_dct_scaled_decode_close_to_full_decode():
    img = smooth_image(480, 640, seed=5)
    payload = encode(img, quality=95)
    boxes = [(0, 0, 480, 640), (40, 60, 400, 520), (10, 10, 300, 300)]
    scaled = _decode([payload] * 3, boxes, (48, 64), dct_scaling=True)[1].astype(int)
    full = _decode([payload] * 3, boxes, (48, 64), dct_scaling=False)[1].astype(int)
    diff = np.abs(scaled - full)
    assert 0 < diff.mean() <= 2.0 and diff.max() <= 24, (diff.mean(), diff.max())


def test_batch_of_many_sizes_matches_single_decodes():
    rng = np.random.default_rng(0)
    payloads, boxes = [], []
    for i in range(12):
        h, w = (int(v) for v in rng.integers(8, 200, 2))
        payloads.append(jpeg(h, w, seed=i, quality=75))
        bh, bw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        boxes.append((int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1)), bh, bw))
    flips = rng.random(12) < 0.5
    status, batch = _decode(payloads, boxes, (24, 40), flips=flips)
    assert (status == 0).all()
    for i in range(12):
        _, single = _decode([payloads[i]], [boxes[i]], (24, 40), flips=flips[i:i + 1])
        assert np.array_equal(batch[i], single[0])
