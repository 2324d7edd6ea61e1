"""The CUDA source of the fused kernel, compiled as C++ through a host shim, run on the CPU and
compared with the NumPy reference of the resize definition (and the reference with PIL)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from chute._output_types import image_batch_shape
from chute.kernels import IMAGENET_MEAN, IMAGENET_STD
from tests._media import smooth_image
from tests._reference_resize import reference_batch, resample, round_uint8
from tests.kernels.cases import OUTPUT_SIZES, make_batch
from tests.kernels.compare import assert_matches_reference, run_shim


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32])
@pytest.mark.parametrize("out_size", OUTPUT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_kernel_matches_reference(kernel_shim, out_size, dtype, layout):
    images, padded, boxes, flips = make_batch(seed=1)
    out_h, out_w = out_size
    # 77: a stale value the kernel must overwrite
    out = np.full(image_batch_shape(len(images), out_h, out_w, layout), 77, dtype=dtype)
    run_shim(kernel_shim, padded, boxes, flips, out, layout)
    want = reference_batch(images, boxes, flips, out_h, out_w, dtype, layout,
                           IMAGENET_MEAN, IMAGENET_STD)
    assert_matches_reference(out, want)


def test_flip_and_layout_are_not_symmetric_noops(kernel_shim):
    """Guards the comparison itself: a wrong flip or a transposed layout must be detected."""
    images, padded, boxes, flips = make_batch(seed=2)
    out = np.zeros((len(images), 3, 24, 32), dtype=np.float32)
    run_shim(kernel_shim, padded, boxes, flips, out, "NCHW")
    want = reference_batch(images, boxes, ~flips, 24, 32, np.float32, "NCHW",
                           IMAGENET_MEAN, IMAGENET_STD)
    assert np.abs(out - want).max() > 0.1


def test_custom_mean_std(kernel_shim):
    images, padded, boxes, flips = make_batch(seed=3)
    mean, std = (0.1, 0.5, 0.9), (0.3, 0.2, 0.1)
    out = np.zeros((len(images), 7, 5, 3), dtype=np.float32)
    run_shim(kernel_shim, padded, boxes, flips, out, "NHWC", mean=mean, std=std)
    want = reference_batch(images, boxes, flips, 7, 5, np.float32, "NHWC", mean, std)
    assert_matches_reference(out, want)


def test_half_conversion_rounds_to_nearest_even(kernel_shim):
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e9, np.inf, -np.inf,
                        2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-14, 2.0**-14 - 2.0**-25,
                        1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 6.1e-5, 0.1, -300.7],
                       dtype=np.float32)
    # values near the fp16 range exercise the normal/subnormal/overflow branches densely
    near = rng.uniform(-7e4, 7e4, 100_000).astype(np.float32) * rng.choice(
        [1.0, 1e-3, 1e-6], 100_000).astype(np.float32)
    values = np.concatenate([patterns.view(np.float32), special, near])
    bits = np.empty(values.size, dtype=np.uint16)
    kernel_shim.floats_to_half_bits(values.ctypes.data, bits.ctypes.data, values.size)
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    nan = np.isnan(want)
    assert np.isnan(bits.view(np.float16)[nan]).all()
    np.testing.assert_array_equal(bits[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize("case", range(6))
def test_reference_is_pil_bilinear_with_box(case):
    """The reference itself is the definition: compare with PIL (which rounds between passes)."""
    rng = np.random.default_rng(case)
    h, w = int(rng.integers(20, 400)), int(rng.integers(20, 400))
    image = smooth_image(h, w, seed=case)
    bh, bw = rng.uniform(0.1, 1.0) * h, rng.uniform(0.1, 1.0) * w
    y0, x0 = rng.uniform(0, h - bh), rng.uniform(0, w - bw)
    out_h, out_w = int(rng.integers(1, 300)), int(rng.integers(1, 300))
    flip = bool(case % 2)
    ours = round_uint8(resample(image, (y0, x0, bh, bw), out_h, out_w, flip))
    pil = np.asarray(Image.fromarray(image).resize(
        (out_w, out_h), Image.BILINEAR, box=(x0, y0, x0 + bw, y0 + bh)))
    if flip:
        pil = pil[:, ::-1]
    diff = np.abs(ours.astype(np.float64) - pil)
    assert diff.mean() <= 1.0 and diff.max() <= 8
