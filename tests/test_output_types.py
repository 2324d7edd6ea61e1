"""The one place layouts and output dtypes are checked and converted."""

import subprocess
import sys

import numpy as np
import pytest

from chute._output_types import (
    LAYOUTS,
    OUTPUT_DTYPES,
    check_layout,
    image_batch_shape,
    image_size_of,
    numpy_dtype,
    output_dtype,
    torch_dtype,
)


def test_layouts():
    assert [check_layout(layout) for layout in LAYOUTS] == ["NCHW", "NHWC"]
    for bad in ("CHW", "nchw", None, 3):
        with pytest.raises(ValueError, match=r"ImageOptions\(layout=\.\.\.\) must be 'NCHW'"):
            check_layout(bad, "ImageOptions(layout=...)")


def test_every_form_of_a_dtype_has_one_name():
    import torch

    for name in OUTPUT_DTYPES:
        forms = (name, np.dtype(name), getattr(np, name), getattr(torch, name))
        assert {output_dtype(form) for form in forms} == {name}
        assert numpy_dtype(name) == np.dtype(name)
        assert torch_dtype(np.dtype(name)) is getattr(torch, name)


@pytest.mark.parametrize("bad", ["float64", "half", "f2", np.float64, "torch.bfloat16", None, 3])
def test_other_dtypes_are_rejected_naming_the_argument(bad):
    with pytest.raises(ValueError, match="out must be uint8, float16 or float32"):
        output_dtype(bad, "out")


def test_torch_dtypes_other_than_the_three_are_rejected():
    import torch

    with pytest.raises(ValueError, match="dtype must be"):
        output_dtype(torch.bfloat16)


def test_shapes_follow_the_layout():
    assert image_batch_shape(2, 5, 7, "NCHW") == (2, 3, 5, 7)
    assert image_batch_shape(2, 5, 7, "NHWC") == (2, 5, 7, 3)
    assert image_size_of((2, 3, 5, 7), "NCHW") == (5, 7)
    assert image_size_of((2, 5, 7, 3), "NHWC") == (5, 7)
    with pytest.raises(ValueError, match=r"out must be a NCHW image batch, \[B, 3, H, W\]"):
        image_size_of((2, 5, 7, 3), "NCHW", "out")
    with pytest.raises(ValueError, match="3 channels"):
        image_size_of((5, 7, 3), "NHWC")


@pytest.mark.slow
def test_import_does_not_load_torch():
    code = "import sys, chute._output_types; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
