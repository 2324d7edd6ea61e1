"""Fractional source boxes (PIL's `resize(box=...)` convention) on the CPU path, against the
independent NumPy reference of the resize definition and against PIL itself."""

import numpy as np
import pytest
from PIL import Image

from chute.fallbacks import decode_batch
from chute.fallbacks._status import BOX_OUTSIDE
from tests._media import encode, jpeg
from tests._reference_resize import resample, round_uint8
from tests.fallbacks._images import pack, turbojpeg_rgb

# (image h, w), fractional box (top, left, h, w), output (h, w)
CASES = [
    ((37, 53), (0.4, 1.7, 35.9, 50.05), (19, 23)),  # odd sizes, downscale
    ((37, 53), (5.5, 7.25, 29.0, 31.5), (29, 31)),  # about identity scale, half-pixel offsets
    ((41, 29), (10.3, 8.6, 0.2, 0.35), (5, 3)),  # tiny (sub-pixel) box, upscaled
    ((41, 29), (0.0, 0.0, 1.5, 2.25), (7, 9)),  # tiny box at the top-left corner
    ((64, 96), (3.25, 40.5, 60.75, 55.5), (33, 47)),  # touching the bottom and right edges
    ((64, 96), (63.5, 95.5, 0.5, 0.5), (2, 2)),  # half-pixel box in the bottom-right pixel
    ((375, 500), (16.40625, 62.5, 328.125, 328.125), (224, 224)),  # torchvision eval of 500x375
    ((300, 411), (2.9, 7.1, 290.6, 399.3), (13, 17)),  # > 20x downscale
]


def _decode(payloads, boxes, out_shape, dtype=np.uint8, **kwargs):
    data, offsets = pack(payloads)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    flips = np.zeros(len(boxes), bool)
    out = np.full((len(boxes), *out_shape, 3), 77, dtype=dtype)
    status = decode_batch(data, offsets, boxes, flips, out, layout="NHWC", **kwargs)
    return status, out


@pytest.mark.parametrize("roi", [False, None])
@pytest.mark.parametrize("size,box,out_size", CASES)
def test_matches_the_float_reference(size, box, out_size, roi):
    payload = jpeg(*size, seed=7, quality=88)
    pixels = turbojpeg_rgb(payload)
    status, out = _decode([payload], [box], out_size, dct_scaling=False, roi_decode=roi)
    assert status.tolist() == [0]
    expected = round_uint8(resample(pixels, box, *out_size))
    # float32 vs float64 accumulation may only flip values sitting on a .5 boundary
    assert np.abs(out[0].astype(int) - expected).max() <= 1


@pytest.mark.parametrize("size,box,out_size", CASES)
def test_matches_pil_resize_with_the_same_box(size, box, out_size):
    payload = jpeg(*size, seed=2, quality=92)
    pixels = turbojpeg_rgb(payload)
    status, out = _decode([payload], [box], out_size, dct_scaling=False)
    assert status.tolist() == [0]
    top, left, h, w = box
    pil = np.asarray(Image.fromarray(pixels).resize(
        (out_size[1], out_size[0]), Image.BILINEAR, box=(left, top, left + w, top + h)))
    diff = np.abs(out[0].astype(int) - pil.astype(int))
    # PIL rounds to uint8 between its two passes; chute does not
    assert diff.mean() <= 0.5 and diff.max() <= 2, (diff.mean(), diff.max())


def test_a_fraction_moves_the_result():
    """A quarter-pixel shift changes the output the way the reference says (the fraction is not
    rounded away anywhere)."""
    payload = encode(np.random.default_rng(0).integers(0, 256, (40, 40, 3), np.uint8),
                     quality=95)
    pixels = turbojpeg_rgb(payload)
    whole = _decode([payload], [(4, 4, 30, 30)], (30, 30), np.float32, dct_scaling=False)[1]
    shifted = _decode([payload], [(4.25, 4.25, 30, 30)], (30, 30), np.float32,
                      dct_scaling=False)[1]
    assert np.abs(whole - shifted).mean() > 0.05
    want = resample(pixels, (4.25, 4.25, 30, 30), 30, 30)
    got = shifted[0] * (255 * np.array([0.229, 0.224, 0.225])) + 255 * np.array(
        [0.485, 0.456, 0.406])
    assert np.abs(got - want).max() < 1e-2


def test_integer_boxes_as_floats_give_identical_outputs():
    payloads = [jpeg(120, 90, seed=s, quality=80) for s in range(3)]
    boxes = [(0, 0, 120, 90), (7, 3, 50, 61), (100, 80, 20, 10)]
    data, offsets = pack(payloads)
    outs = []
    for dtype in (np.int32, np.int64, np.float64):
        out = np.empty((3, 3, 24, 20), np.float16)
        status = decode_batch(data, offsets, np.asarray(boxes, dtype), np.zeros(3, bool), out)
        assert status.tolist() == [0, 0, 0]
        outs.append(out)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_dct_scaling_with_fractional_boxes_stays_close():
    payload = jpeg(480, 640, seed=5, quality=95)
    boxes = [(10.5, 20.25, 440.75, 600.5), (0.3, 0.7, 479.7, 639.3)]
    scaled = _decode([payload] * 2, boxes, (48, 64), dct_scaling=True)[1].astype(int)
    full = _decode([payload] * 2, boxes, (48, 64), dct_scaling=False)[1].astype(int)
    diff = np.abs(scaled - full)
    assert 0 < diff.mean() <= 2.0, diff.mean()


@pytest.mark.parametrize("box", [
    (0.0, 0.0, 0.0, 5.0),  # empty
    (-0.5, 0.0, 5.0, 5.0),  # starts above the image
    (0.0, 36.5, 5.0, 4.0),  # ends past the right edge (40.5 > 40)
    (float("nan"), 0.0, 5.0, 5.0),
])
def test_boxes_outside_the_image_fail_the_sample(box):
    payload = jpeg(30, 40, seed=1)
    status, out = _decode([payload, payload], [box, (1.5, 1.5, 20.0, 20.0)], (8, 8))
    assert status.tolist() == [BOX_OUTSIDE, 0]
    assert (out[0] == 0).all()
