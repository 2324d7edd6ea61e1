"""Output dtypes, normalization, flip, layouts, threads, fork and argument checks."""

import multiprocessing
import os

import numba
import numpy as np
import pytest

from chute._output_types import image_batch_shape
from chute.errors import BackendUnavailableError
from chute.fallbacks import IMAGENET_MEAN, IMAGENET_STD, decode_batch, turbojpeg_library
from tests._media import encode, jpeg, smooth_image
from tests.fallbacks._images import pack

OUT = (23, 31)


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(1)
    payloads, boxes = [], []
    for i in range(9):
        h, w = (int(v) for v in rng.integers(20, 160, 2))
        payloads.append(jpeg(h, w, seed=i))
        bh, bw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        boxes.append((int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1)), bh, bw))
    payloads.append(encode(smooth_image(40, 50), "PNG"))
    boxes.append((3, 4, 30, 40))
    data, offsets = pack(payloads)
    flips = rng.random(len(boxes)) < 0.5
    return data, offsets, np.array(boxes, np.int32), flips


def _run(batch, dtype, layout="NCHW", flips=None, **kwargs):
    data, offsets, boxes, default_flips = batch
    flips = default_flips if flips is None else flips
    out = np.empty(image_batch_shape(len(boxes), *OUT, layout), dtype)
    status = decode_batch(data, offsets, boxes, flips, out, layout=layout, **kwargs)
    assert (status == 0).all()
    return out


def _resampled_values(batch, **kwargs):
    """The unrounded resampled values v: float32 output with mean 0 and std 1/255."""
    return _run(batch, np.float32, mean=(0, 0, 0), std=(1 / 255,) * 3, **kwargs)


def test_normalization_is_exact_for_float32_and_float16(batch):
    v = _resampled_values(batch)
    mean = (255 * np.array(IMAGENET_MEAN)).astype(np.float32).reshape(1, 3, 1, 1)
    std = (255 * np.array(IMAGENET_STD)).astype(np.float32).reshape(1, 3, 1, 1)
    expected = (v - mean) / std
    assert expected.dtype == np.float32
    assert np.array_equal(_run(batch, np.float32), expected)
    assert np.array_equal(_run(batch, np.float16).view(np.uint16),
                          expected.astype(np.float16).view(np.uint16))


def test_custom_mean_std(batch):
    v = _resampled_values(batch)
    mean, std = (0.5, 0.25, 0.1), (0.2, 0.3, 0.4)
    m = (255 * np.array(mean)).astype(np.float32).reshape(1, 3, 1, 1)
    s = (255 * np.array(std)).astype(np.float32).reshape(1, 3, 1, 1)
    assert np.array_equal(_run(batch, np.float32, mean=mean, std=std), (v - m) / s)


def test_uint8_is_rounded_half_up_and_clamped(batch):
    v = _resampled_values(batch)
    expected = np.clip(np.floor(v + np.float32(0.5)), 0, 255).astype(np.uint8)
    assert np.array_equal(_run(batch, np.uint8), expected)


def test_flip_mirrors_columns_exactly(batch):
    n = len(batch[2])
    plain = _run(batch, np.float16, flips=np.zeros(n, bool))
    flipped = _run(batch, np.float16, flips=np.ones(n, bool))
    assert np.array_equal(flipped.view(np.uint16), plain[..., ::-1].view(np.uint16))


def test_nhwc_is_nchw_transposed(batch):
    for dtype in (np.uint8, np.float16, np.float32):
        nchw = _run(batch, dtype)
        nhwc = _run(batch, dtype, layout="NHWC")
        assert np.array_equal(nhwc.view(np.uint8), nchw.transpose(0, 2, 3, 1).copy().view(np.uint8))


def test_same_bytes_for_any_thread_count(batch):
    results = [_run(batch, np.float16, threads=t).view(np.uint16) for t in (1, 2)]
    results.append(_run(batch, np.float16, threads=numba.config.NUMBA_NUM_THREADS).view(np.uint16))
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # restored


def _decode_in_child(batch, queue):
    queue.put(_run(batch, np.uint8).tobytes())


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_works_in_a_forked_child_after_use_in_the_parent(batch):
    parent = _run(batch, np.uint8)  # creates this process's handles
    if numba.threading_layer() == "omp":
        pytest.skip("another module started Numba's OpenMP layer first; GNU OpenMP aborts "
                    "children forked after use (chute itself asks for a fork-safe layer)")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_decode_in_child, args=(batch, queue))
    child.start()
    result = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert result == parent.tobytes()


def test_turbojpeg_library_is_found_and_overridable(monkeypatch, tmp_path):
    path = turbojpeg_library()
    assert turbojpeg_library(path) == path
    monkeypatch.setenv("CHUTE_TURBOJPEG", str(tmp_path / "missing.so"))
    with pytest.raises(BackendUnavailableError, match="CHUTE_TURBOJPEG"):
        turbojpeg_library()
    with pytest.raises(BackendUnavailableError, match="does not exist"):
        turbojpeg_library(tmp_path / "nope.so")


def test_bad_arguments_raise_clear_errors(batch):
    data, offsets, boxes, flips = batch
    n = len(boxes)
    good = np.empty((n, 3, 8, 8), np.float32)
    with pytest.raises(ValueError, match="layout"):
        decode_batch(data, offsets, boxes, flips, good, layout="CHW")
    with pytest.raises(ValueError, match="out must be"):
        decode_batch(data, offsets, boxes, flips, np.empty((n, 8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        decode_batch(data, offsets, boxes, flips, np.empty((n, 3, 8, 8), np.float64))
    with pytest.raises(ValueError, match="offsets"):
        decode_batch(data, offsets[:-1], boxes, flips, good)
    with pytest.raises(ValueError, match="boxes"):
        decode_batch(data, offsets, boxes[:, :3], flips, good)
    with pytest.raises(ValueError, match="std"):
        decode_batch(data, offsets, boxes, flips, good, std=(0, 1, 1))


def test_empty_batch():
    data, offsets = pack([])
    out = np.empty((0, 3, 8, 8), np.float16)
    status = decode_batch(data, offsets, np.zeros((0, 4), np.int32), np.zeros(0, bool), out)
    assert status.shape == (0,) and status.dtype == np.uint8
