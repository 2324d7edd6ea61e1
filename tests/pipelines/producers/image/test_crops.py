import math

import numpy as np
import pytest

from chute.pipelines.producers.image._crops import CropConfig, crop_boxes


def _sizes(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(50, 800, n), rng.integers(50, 800, n)


def test_train_boxes_inside_image():
    h, w = _sizes(5000)
    boxes, flips = crop_boxes(1, 0, np.arange(5000), h, w, CropConfig((224, 224)))
    top, left, bh, bw = boxes.T
    assert boxes.dtype == np.float64 and boxes.shape == (5000, 4)
    assert (boxes == np.round(boxes)).all()  # train boxes are whole pixels
    assert flips.dtype == bool and flips.shape == (5000,)
    assert (top >= 0).all() and (left >= 0).all() and (bh >= 1).all() and (bw >= 1).all()
    assert (top + bh <= h).all() and (left + bw <= w).all()


def test_train_area_and_ratio_ranges_statistically():
    n = 20000
    h = np.full(n, 1000)
    w = np.full(n, 1000)
    cfg = CropConfig((224, 224), scale=(0.2, 0.6), ratio=(0.5, 2.0))
    boxes, _ = crop_boxes(3, 2, np.arange(n), h, w, cfg)
    frac = boxes[:, 2].astype(float) * boxes[:, 3] / 1e6
    ratio = boxes[:, 3] / boxes[:, 2]
    # rounding of h and w moves area/ratio slightly outside the exact range
    assert frac.min() > 0.2 * 0.98 and frac.max() < 0.6 * 1.02
    assert ratio.min() > 0.5 * 0.98 and ratio.max() < 2.0 * 1.02
    # area uniform in [0.2, 0.6]: mean 0.4; log-ratio uniform: mean 0
    assert abs(frac.mean() - 0.4) < 0.01
    assert abs(np.log(ratio).mean()) < 0.02
    # positions cover the image: the mean centre is near the image centre
    cy = boxes[:, 0] + boxes[:, 2] / 2
    assert abs(cy.mean() - 500) < 10


def test_flips_about_half_and_configurable():
    n = 20000
    h, w = _sizes(n)
    _, flips = crop_boxes(0, 0, np.arange(n), h, w, CropConfig((64, 64)))
    assert abs(flips.mean() - 0.5) < 0.02
    _, never = crop_boxes(0, 0, np.arange(n), h, w, CropConfig((64, 64), flip_p=0.0))
    assert not never.any()


def test_extreme_aspect_falls_back_to_center_crop():
    # a 10x1000 strip: no attempt can fit a box of ratio <= 4/3 with area >= 8%
    ids = np.arange(100)
    h = np.full(100, 10)
    w = np.full(100, 1000)
    boxes, _ = crop_boxes(0, 0, ids, h, w, CropConfig((224, 224)))
    expected_w = round(10 * 4 / 3)
    assert (boxes[:, 2] == 10).all() and (boxes[:, 3] == expected_w).all()
    assert (boxes[:, 0] == 0).all() and (boxes[:, 1] == (1000 - expected_w) // 2).all()
    tall, _ = crop_boxes(0, 0, ids, w, h, CropConfig((224, 224)))
    assert (tall[:, 3] == 10).all() and (tall[:, 2] == round(10 / (3 / 4))).all()


def test_crop_resize_eval_box_math():
    cfg = CropConfig((224, 224), mode="eval", eval_crop="crop-resize")
    boxes, flips = crop_boxes(0, 0, np.arange(3), [375, 500, 224], [500, 375, 224], cfg)
    assert not flips.any()
    side = round(375 * 0.875)  # shorter side resized to 256, centre 224 -> 0.875 of it
    assert boxes[0].tolist() == [round((375 - side) / 2), round((500 - side) / 2), side, side]
    assert boxes[1].tolist() == [round((500 - side) / 2), round((375 - side) / 2), side, side]
    assert boxes[2].tolist() == [14, 14, 196, 196]
    rect = CropConfig((100, 200), mode="eval", crop_fraction=1.0, eval_crop="crop-resize")
    (box,), _ = crop_boxes(0, 0, [0], [300], [300], rect)
    assert box.tolist() == [75, 0, 150, 300]


def test_deterministic_and_independent_of_batch_composition():
    h, w = _sizes(1000)
    cfg = CropConfig((224, 224))
    ids = np.arange(1000)
    a, fa = crop_boxes(7, 3, ids, h, w, cfg)
    b, fb = crop_boxes(7, 3, ids, h, w, cfg)
    assert np.array_equal(a, b) and np.array_equal(fa, fb)
    perm = np.random.default_rng(1).permutation(1000)[:300]
    c, fc = crop_boxes(7, 3, ids[perm], h[perm], w[perm], cfg)
    assert np.array_equal(c, a[perm]) and np.array_equal(fc, fa[perm])
    single, fs = crop_boxes(7, 3, ids[5:6], h[5:6], w[5:6], cfg)
    assert np.array_equal(single[0], a[5]) and fs[0] == fa[5]


def test_epoch_and_seed_change_boxes():
    h, w = _sizes(500)
    cfg = CropConfig((224, 224))
    a, _ = crop_boxes(7, 0, np.arange(500), h, w, cfg)
    b, _ = crop_boxes(7, 1, np.arange(500), h, w, cfg)
    c, _ = crop_boxes(8, 0, np.arange(500), h, w, cfg)
    assert (a != b).any(axis=1).mean() > 0.9
    assert (a != c).any(axis=1).mean() > 0.9


def test_tiny_images():
    boxes, _ = crop_boxes(0, 0, np.arange(4), [1, 1, 2, 7], [1, 5, 1, 5], CropConfig((224, 224)))
    assert (boxes[:, 2] >= 1).all() and (boxes[:, 3] >= 1).all()
    assert (boxes[:, 0] + boxes[:, 2] <= [1, 1, 2, 7]).all()
    assert (boxes[:, 1] + boxes[:, 3] <= [1, 5, 1, 5]).all()
    ev, _ = crop_boxes(0, 0, [0], [1], [1], CropConfig((224, 224), mode="eval",
                                                        eval_crop="crop-resize"))
    assert ev[0].tolist() == [0, 0, 1, 1]
    # torchvision: 1x1 -> 256x256, centre 224: the box [16/256, 240/256) of the one pixel
    tv, _ = crop_boxes(0, 0, [0], [1], [1], CropConfig((224, 224), mode="eval"))
    np.testing.assert_allclose(tv[0], [16 / 256, 16 / 256, 224 / 256, 224 / 256])


def test_invalid_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="mode"):
        CropConfig((224, 224), mode="test")
    with pytest.raises(ValueError, match="eval_crop"):
        CropConfig((224, 224), mode="eval", eval_crop="center")
    with pytest.raises(ValueError, match="scale"):
        CropConfig((224, 224), scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="sample 1"):
        crop_boxes(0, 0, [0, 1], [10, 0], [10, 10], CropConfig((8, 8)))
    with pytest.raises(ValueError, match="length"):
        crop_boxes(0, 0, [0, 1], [10], [10], CropConfig((8, 8)))


@pytest.mark.parametrize("attempts", [10**9, 101, -1, 2.5, True])
def test_attempts_beyond_the_limit_are_one_line(attempts):
    """attempts=10**9 drew 2 * 10**9 streams per sample: a raw MemoryError (issue 37)."""
    with pytest.raises(ValueError, match=r"attempts must be an integer from 0 to 100"):
        CropConfig((8, 8), attempts=attempts)


def test_the_most_attempts_and_a_numpy_integer_are_taken():
    heights, widths = _sizes(5)
    for attempts in (100, np.int64(7)):
        boxes, _ = crop_boxes(0, 0, np.arange(5), heights, widths,
                              CropConfig((8, 8), attempts=attempts))
        assert boxes.shape == (5, 4)


def test_scalar_size_is_square():
    assert CropConfig(96).size == (96, 96)
    assert math.isclose(CropConfig((1, 2)).ratio[1], 4 / 3)


def _torchvision_box(h, w, s, fraction=0.875):
    """torchvision's Resize(round(s / fraction)) + CenterCrop(s) as a box of the source."""
    r = round(s / fraction)
    if w <= h:
        new_w, new_h = r, int(r * h / w)
    else:
        new_h, new_w = r, int(r * w / h)
    top, left = int(round((new_h - s) / 2.0)), int(round((new_w - s) / 2.0))
    return top * h / new_h, left * w / new_w, s * h / new_h, s * w / new_w


@pytest.mark.parametrize("s", [224, 160, 64, 1])
def test_torchvision_eval_boxes_are_resize_then_center_crop(s):
    h, w = _sizes(400, seed=s)
    h = np.concatenate([h, [1, 1, 7, 500, 375, 2000]])
    w = np.concatenate([w, [1, 9, 1, 375, 500, 3]])
    boxes, flips = crop_boxes(0, 0, np.arange(len(h)), h, w, CropConfig(s, mode="eval"))
    assert boxes.dtype == np.float64 and not flips.any()
    want = np.array([_torchvision_box(int(a), int(b), s) for a, b in zip(h, w, strict=True)])
    np.testing.assert_allclose(boxes, want, rtol=1e-12, atol=1e-9)
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] > 0).all()
    assert (boxes[:, 0] + boxes[:, 2] <= h).all() and (boxes[:, 1] + boxes[:, 3] <= w).all()


def test_torchvision_eval_boxes_of_a_non_square_size():
    # (100, 200) at 0.875 covers (114, 229): a 300x300 image resizes to 229x229, crop at
    # (round(64.5), round(14.5)) = (64, 14) (half to even, as Python's round)
    (box,), _ = crop_boxes(0, 0, [0], [300], [300], CropConfig((100, 200), mode="eval"))
    k = 300 / 229
    np.testing.assert_allclose(box, [64 * k, 14 * k, 100 * k, 200 * k], rtol=1e-12)
    # a wide image: the height decides (114), the width is truncated like torchvision's
    (box,), _ = crop_boxes(0, 0, [0], [300], [900], CropConfig((100, 200), mode="eval"))
    new_w = int(114 * 900 / 300)
    np.testing.assert_allclose(box, [7 * 300 / 114, round((new_w - 200) / 2) * 900 / new_w,
                                     100 * 300 / 114, 200 * 900 / new_w], rtol=1e-12)


def _attempt_loop_boxes(seed, epoch, ids, heights, widths, config):
    """The train boxes drawn attempt by attempt (torchvision's loop, one keyed draw per attempt
    and quantity): what `crop_boxes` computed before its draws were vectorised, and must still
    give bit for bit (resume and cross-version reproducibility depend on it)."""
    from chute.pipelines.producers.image._crops import _center_fallback
    from chute.pipelines.sampling._keyed_random import derive_key, uniform

    key = derive_key(seed, epoch, "crop")
    counters = np.asarray(ids).astype(np.uint64)
    area = (heights * widths).astype(np.float64)
    log_lo, log_hi = math.log(config.ratio[0]), math.log(config.ratio[1])
    box_h, box_w = _center_fallback(heights, widths, config.ratio)
    found = np.zeros(len(ids), dtype=bool)
    for attempt in range(config.attempts):
        u_area = uniform(key, counters, 2 * attempt)
        u_ratio = uniform(key, counters, 2 * attempt + 1)
        target = area * (config.scale[0] + u_area * (config.scale[1] - config.scale[0]))
        aspect = np.exp(log_lo + u_ratio * (log_hi - log_lo))
        w = np.round(np.sqrt(target * aspect)).astype(np.int64)
        h = np.round(np.sqrt(target / aspect)).astype(np.int64)
        ok = ~found & (w > 0) & (w <= widths) & (h > 0) & (h <= heights)
        box_h, box_w = np.where(ok, h, box_h), np.where(ok, w, box_w)
        found |= ok
    rand_top = np.floor(uniform(key, counters, 1_000_001) * (heights - box_h + 1))
    rand_left = np.floor(uniform(key, counters, 1_000_002) * (widths - box_w + 1))
    top = np.where(found, rand_top.astype(np.int64), (heights - box_h) // 2)
    left = np.where(found, rand_left.astype(np.int64), (widths - box_w) // 2)
    flips = uniform(key, counters, 1_000_003) < config.flip_p
    return np.stack([top, left, box_h, box_w], axis=1).astype(np.float64), flips


@pytest.mark.parametrize("n", [1, 7, 33, 1000])
@pytest.mark.parametrize("config", [
    CropConfig((224, 224)),
    CropConfig((96, 96), scale=(0.05, 0.32)),
    CropConfig((64, 64), scale=(0.9, 1.0), ratio=(3.0, 4.0), attempts=3),  # many fallbacks
    CropConfig((64, 64), attempts=1),
    CropConfig((64, 64), attempts=0),
], ids=["default", "dino-local", "fallbacks", "one-attempt", "no-attempt"])
def test_train_boxes_equal_the_attempt_loop(n, config):
    rng = np.random.default_rng(n)
    ids = rng.choice(10**9, size=n, replace=False)
    h, w = rng.integers(1, 900, n), rng.integers(1, 900, n)
    boxes, flips = crop_boxes(12, 3, ids, h, w, config)
    want_boxes, want_flips = _attempt_loop_boxes(12, 3, ids, h, w, config)
    np.testing.assert_array_equal(boxes, want_boxes)
    np.testing.assert_array_equal(flips, want_flips)
    if config.attempts == 3 and n >= 7:  # the fallback path is exercised
        from chute.pipelines.producers.image._crops import _center_fallback

        centre = np.stack(_center_fallback(h, w, config.ratio), axis=1)
        assert (boxes[:, 2:] == centre).all(axis=1).any()


def test_uniform_streams_equal_uniform_per_stream():
    from chute.pipelines.sampling._keyed_random import uniform, uniform_streams

    counters = np.arange(0, 10**12, 10**9 + 7, dtype=np.uint64)
    streams = [0, 1, 19, 1_000_001, 2**40]
    got = uniform_streams(0xDEADBEEF12345, counters, streams)
    assert got.shape == (len(streams), len(counters))
    for row, stream in zip(got, streams, strict=True):
        np.testing.assert_array_equal(row, uniform(0xDEADBEEF12345, counters, stream))
