"""The shared box geometry (chute/_resize_box.py): decode windows hold every tap of the resample
with room for fancy upsampling, fractional boxes included, and the scalar rule the CPU kernels
jit agrees with the vectorised one the GPU paths use."""

import numpy as np
import pytest

from chute._resize_box import BOX_SLACK, boxes_outside, decode_span, decode_windows
from tests._reference_resize import axis_weights


def _random_boxes(rng, n, integer):
    sizes = rng.integers(1, 700, size=(n, 2))
    length = rng.uniform(0.02, 1.0, (n, 2)) * sizes
    start = rng.uniform(0, 1, (n, 2)) * (sizes - length)
    if integer:
        length = np.maximum(1, np.floor(length))
        start = np.floor(rng.uniform(0, 1, (n, 2)) * (sizes - length + 1))
    return np.concatenate([start, length], axis=1), sizes


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("integer", [True, False])
def test_windows_hold_every_tap_with_a_pixel_to_spare(integer):
    rng = np.random.default_rng(int(integer))
    boxes, sizes = _random_boxes(rng, 300, integer)
    out = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
    windows, inner = decode_windows(boxes, sizes, out)
    for b in range(len(boxes)):
        for axis in range(2):
            first, length = int(windows[b, axis]), int(windows[b, 2 + axis])
            size = int(sizes[b, axis])
            w = axis_weights(out[axis], boxes[b, axis], boxes[b, 2 + axis], size)
            used = np.flatnonzero(w.any(axis=0))
            # one pixel beyond the taps on each side, unless the image ends first
            assert first <= max(used[0] - 1, 0) and first + length >= min(used[-1] + 2, size)
            assert (first, first + length) == decode_span(boxes[b, axis], boxes[b, 2 + axis],
                                                          out[axis], size)
            assert inner[b, axis] == pytest.approx(boxes[b, axis] - first, abs=1e-3)
    assert (windows[:, :2] >= 0).all() and (windows[:, :2] + windows[:, 2:] <= sizes).all()
    np.testing.assert_allclose(inner[:, 2:], boxes[:, 2:], rtol=1e-6)


def test_without_an_output_size_the_window_is_the_enclosing_whole_pixels():
    boxes = [[3, 4, 10, 20], [2.5, 0.25, 1.0, 3.5], [0.0, 7.9, 0.1, 0.1]]
    windows, inner = decode_windows(boxes, [[20, 30]] * 3)
    assert windows.tolist() == [[3, 4, 10, 20], [2, 0, 2, 4], [0, 7, 1, 1]]
    np.testing.assert_allclose(inner, [[0, 0, 10, 20], [0.5, 0.25, 1.0, 3.5],
                                       [0.0, 0.9, 0.1, 0.1]], atol=1e-6)


def test_boxes_outside():
    sizes = [[10, 10]] * 6
    boxes = [[0, 0, 10, 10], [0.5, 0.5, 9.5, 9.5], [0, 0, 0, 1], [-0.1, 0, 1, 1],
             [0, 9.5, 1, 0.6], [np.nan, 0, 1, 1]]
    assert boxes_outside(boxes, sizes).tolist() == [False, False, True, True, True, True]
    assert not boxes_outside([[-BOX_SLACK / 2, 0, 10 + BOX_SLACK / 2, 10]], [[10, 10]],
                             BOX_SLACK).any()
