"""A clip in the output dtype: exactly torch's x / 127.5 - 1 in float32, rounded to the dtype."""

import numpy as np
import pytest
import torch

from chute.pipelines.producers.video._output import to_output


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float16"])
def test_clip_output_is_x_over_127_5_minus_1_rounded_to_the_dtype(dtype):
    frames = np.random.default_rng(0).integers(0, 256, (3, 5, 7, 3), dtype=np.uint8)
    got = to_output(frames, dtype)
    x = torch.from_numpy(np.ascontiguousarray(frames.transpose(0, 3, 1, 2)))
    expected = x if dtype == "uint8" else (x.float() / 127.5 - 1.0).to(getattr(torch, dtype))
    assert got.dtype == np.dtype(dtype) and got.shape == (3, 3, 5, 7)
    assert torch.equal(torch.from_numpy(got), expected)
