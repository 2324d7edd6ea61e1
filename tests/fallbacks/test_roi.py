"""Region-of-interest decoding: the same samples as full-frame decoding, for less work."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from chute.fallbacks import DecodeStatus, decode_batch, roi_decoder_status
from chute.fallbacks._slow_path import first_jpeg_warning
from chute.pipelines import CropConfig, crop_boxes
from tests._media import encode, jpeg, misplaced_restart_marker, smooth_image, truncated
from tests.fallbacks._images import pack


def test_the_roi_decoder_builds_on_this_machine():
    # dev.sh installs a C compiler and libjpeg-turbo's headers, so CI must exercise this path.
    status = roi_decoder_status()
    assert status.available, status.reason
    assert os.path.isfile(status.library)


def _variants():
    img = smooth_image(203, 317, seed=11)
    yield "444", encode(img, quality=92, subsampling=0)
    yield "422", encode(img, quality=92, subsampling=1)
    yield "420", encode(img, quality=92, subsampling=2)
    yield "progressive", encode(img, quality=90, progressive=True)
    yield "gray", encode(img[..., 1], quality=90)
    yield "cmyk", encode(img, mode="CMYK", quality=92)
    yield "restart", encode(img, quality=90, restart_marker_blocks=3)


def _decode_both(payloads, boxes, flips, out_shape, dtype, **kwargs):
    data, offsets = pack(payloads)
    results = []
    for roi in (True, False):
        out = np.full(out_shape, 7, dtype=dtype)
        status = decode_batch(data, offsets, boxes, flips, out, roi_decode=roi, **kwargs)
        results.append((status, out))
    return results


@pytest.mark.parametrize("name", [name for name, _ in _variants()])
@pytest.mark.parametrize("size", [64, 16, 5])  # 16 and 5 let the decoder scale by 1/2 .. 1/8
def test_random_crops_give_the_pixels_of_a_full_decode(name, size):
    payload = dict(_variants())[name]
    n = 48
    ids = np.arange(n)
    boxes, flips = crop_boxes(3, 1, ids, np.full(n, 203), np.full(n, 317),
                              CropConfig((size, size)))
    # plus the corners, the full frame and one-pixel boxes
    extra = np.array([[0, 0, 203, 317], [0, 0, 9, 9], [194, 308, 9, 9], [101, 0, 1, 1],
                      [0, 316, 1, 1], [202, 150, 1, 20]], np.int32)
    boxes = np.concatenate([boxes, extra])
    flips = np.concatenate([flips, np.zeros(len(extra), bool)])
    (s_roi, roi), (s_full, full) = _decode_both([payload] * len(boxes), boxes, flips,
                                                (len(boxes), size, size, 3), np.uint8,
                                                layout="NHWC")
    assert s_roi.tolist() == s_full.tolist() == [0] * len(boxes)
    diff = np.abs(roi.astype(int) - full.astype(int))
    # Same decoded pixels; the tap weights are computed relative to another origin, which can
    # move a float32 weight by one ulp, so a value at a .5 rounding boundary may differ by 1.
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999, (diff.max(), (diff == 0).mean())


def test_float_outputs_agree_to_float_rounding():
    payload = dict(_variants())["420"]
    n = 32
    boxes, flips = crop_boxes(5, 0, np.arange(n), np.full(n, 203), np.full(n, 317),
                              CropConfig((48, 40)))
    (s_roi, roi), (s_full, full) = _decode_both([payload] * n, boxes, flips, (n, 3, 48, 40),
                                                np.float32)
    assert (s_roi == 0).all() and (s_full == 0).all()
    assert np.abs(roi - full).max() < 1e-4


_GOOD = jpeg(240, 160, seed=12)


def _after_a_good_sample(payload, crop_rows):
    """[(status, out) with ROI decoding, without] of [_GOOD, payload], both cropped to their
    top `crop_rows` rows."""
    boxes = np.array([[0, 0, crop_rows, 160]] * 2, np.int32)
    return _decode_both([_GOOD, payload], boxes, np.zeros(2, bool), (2, 16, 16, 3), np.uint8,
                        layout="NHWC")


def test_truncated_payload_fails_even_when_the_crop_lies_above_the_missing_part():
    # The ROI decoder would never read the missing rows; chute still reports the sample.
    for status, out in _after_a_good_sample(truncated(_GOOD, keep=2 / 3), crop_rows=40):
        assert status[0] == 0
        assert status[1] == DecodeStatus.CORRUPT
        assert not out[1].any()


def test_damage_inside_the_crop_fails_like_a_full_decode():
    damaged = misplaced_restart_marker(_GOOD, at=3 / 4)
    (s_roi, roi), (s_full, _) = _after_a_good_sample(damaged, crop_rows=240)
    assert s_roi.tolist() == s_full.tolist() == [0, DecodeStatus.CORRUPT]
    assert not roi[1].any()


def test_damage_below_the_crop_leaves_the_crop_intact():
    # Rows past the crop are never read: the sample is right, though a full decode fails.
    damaged = misplaced_restart_marker(_GOOD, at=3 / 4)
    (s_roi, roi), (s_full, _) = _after_a_good_sample(damaged, crop_rows=60)
    assert s_full.tolist() == [0, DecodeStatus.CORRUPT]
    assert s_roi.tolist() == [0, 0]
    assert np.array_equal(roi[0], roi[1])


@pytest.mark.slow
def test_without_a_compiler_it_warns_once_and_decodes_full_frames(tmp_path):
    # A fresh process whose cache is empty and whose compiler does not exist.
    script = textwrap.dedent("""
        import warnings
        import numpy as np
        import pytest
        from chute.errors import BackendUnavailableError
        from chute.fallbacks import decode_batch, roi_decoder_status
        from tests._media import jpeg
        from tests.fallbacks._images import pack

        status = roi_decoder_status()
        assert not status.available and "C compiler" in status.reason, status
        data, offsets = pack([jpeg(40, 50)])
        boxes = np.array([[3, 4, 30, 40]], np.int32)
        out = np.zeros((1, 3, 8, 8), np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert decode_batch(data, offsets, boxes, np.zeros(1, bool), out).tolist() == [0]
            decode_batch(data, offsets, boxes, np.zeros(1, bool), out)
        assert len([w for w in caught if "whole JPEG frames" in str(w.message)]) == 1
        assert out.any()
        with pytest.raises(BackendUnavailableError, match="C compiler"):
            decode_batch(data, offsets, boxes, np.zeros(1, bool), out, roi_decode=True)
        print("ok")
    """)
    env = dict(os.environ, CHUTE_CACHE_DIR=str(tmp_path), CC="no-such-compiler",
               PATH=str(tmp_path))  # no cc, gcc or clang either
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=root,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
    assert not list(tmp_path.glob("native/*.so"))


def test_mutated_payloads_never_crash_and_never_leave_garbage_in_failed_slots():
    rng = np.random.default_rng(21)
    sources = [payload for _, payload in _variants()]
    payloads = []
    for k in range(120):
        mutated = bytearray(sources[k % len(sources)])
        for _ in range(rng.integers(1, 6)):  # overwrite a few bytes anywhere past the SOI
            mutated[rng.integers(2, len(mutated))] = rng.integers(0, 256)
        if k % 4 == 0:
            mutated = mutated[: rng.integers(3, len(mutated))]
        payloads.append(bytes(mutated))
    n = len(payloads)
    boxes, flips = crop_boxes(9, 0, np.arange(n), np.full(n, 203), np.full(n, 317),
                              CropConfig((24, 24)))
    (s_roi, roi), (s_full, full) = _decode_both(payloads, boxes, flips, (n, 24, 24, 3),
                                                np.uint8, layout="NHWC")
    for status, out in ((s_roi, roi), (s_full, full)):
        assert set(status.tolist()) <= {0, DecodeStatus.CORRUPT, DecodeStatus.UNREADABLE,
                                         DecodeStatus.BOX_OUTSIDE}
        assert not out[status != 0].any()
    assert (s_roi != 0).any() and (s_roi == 0).any()  # the mutations hit both ways
    # Where libjpeg decodes without a word, both paths hold the same pixels. (Payloads it warns
    # about and still accepts, stray bytes before the end marker, are decoded by PIL on the
    # full-frame path: another libjpeg build.)
    clean = np.array([first_jpeg_warning(np.frombuffer(p, np.uint8)) is None
                      for p in payloads])
    both = (s_roi == 0) & (s_full == 0) & clean
    assert both.sum() >= 10
    assert np.abs(roi[both].astype(int) - full[both].astype(int)).max() <= 1
