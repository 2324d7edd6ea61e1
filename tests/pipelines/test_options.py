"""The Pipeline's argument checks: sizes, dtypes, mean/std units, option types, memory."""

import numpy as np
import pytest
import torch

from chute import ArrayOptions, AudioOptions, Buckets, ImageOptions, VideoOptions
from chute.pipelines._common._options import (
    check_backend_options,
    check_ring_memory,
    image_size_of,
    mean_std_fractions,
    output_dtype,
)
from chute.pipelines.producers._contract import Output


@pytest.mark.parametrize("value, size", [(224, (224, 224)), ((96, 128), (96, 128)),
                                         ("224", (224, 224)), ("96x128", (96, 128)),
                                         (" 96 X 128 ", (96, 128))])
def test_image_size_spellings(value, size):
    assert image_size_of(value) == size


@pytest.mark.parametrize("value", ["", "x", "0x5", "1x2x3", (0, 4), -3, "big"])
def test_bad_image_sizes(value):
    with pytest.raises(ValueError, match="an image size must be") as info:
        image_size_of(value)
    assert "image_size" not in str(info.value)  # the round-2 name (issue 38 item 13)


@pytest.mark.parametrize("make, match", [
    (lambda: ImageOptions(size=-5), "ImageOptions: an image size must be"),
    (lambda: ImageOptions(dtype="float8"), "ImageOptions: dtype must be"),
    (lambda: ImageOptions(layout="HWC"), "ImageOptions: layout must be"),
    (lambda: ImageOptions(mean=(0.5, 0.5)), "ImageOptions: mean and std must be"),
    (lambda: VideoOptions(frame_interval=0), "VideoOptions: frame_interval must be"),
    (lambda: VideoOptions(num_frames=2.5), "VideoOptions: num_frames must be"),
    (lambda: VideoOptions(layout="THWC"), r"VideoOptions: layout must be one of .*'THWC'"),
    (lambda: VideoOptions(size=(0, 4)), r"video option size must be \(H, W\) >= 1"),
    (lambda: Buckets("250p"), "Buckets: buckets must be a non-empty dict"),
    (lambda: Buckets({"250p": {16: (1.0, 8)}}), "Buckets: bucket resolution '250p' is unknown"),
])
def test_options_are_checked_when_they_are_made(make, match):
    # where the mistake is written, not when a Pipeline is built later (issue 38 item 13)
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make, close", [
    (lambda: ImageOptions(sise=224), "size"),
    (lambda: ImageOptions(backend_option={}), "backend_options"),
    (lambda: VideoOptions(num_frame=8), "num_frames"),
    (lambda: AudioOptions(sample_rat=16000), "sample_rate"),
    (lambda: ArrayOptions(dtyp="float16"), "dtype"),
])
def test_a_misspelt_option_names_the_closest_one(make, close):
    with pytest.raises(TypeError, match=f"has no option .*did you mean '{close}'"):
        make()


def test_output_dtypes():
    assert output_dtype("bfloat16") == ("float32", torch.bfloat16)
    assert output_dtype(torch.bfloat16) == ("float32", torch.bfloat16)
    assert output_dtype(torch.uint8) == ("uint8", None)
    with pytest.raises(ValueError, match="bfloat16"):
        output_dtype("int8")


def test_mean_std_units():
    fractions = mean_std_fractions((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert fractions == ((0.5,) * 3, (0.25,) * 3)
    scaled = mean_std_fractions((127.5,) * 3, (63.75,) * 3)
    np.testing.assert_allclose(scaled, fractions)
    for mean, std in [((127.5,) * 3, (0.25,) * 3), ((0.5,) * 3, (63.75,) * 3)]:
        with pytest.raises(ValueError, match="mix units"):
            mean_std_fractions(mean, std)
    with pytest.raises(ValueError, match="3 values"):
        mean_std_fractions((0.5, 0.5), (0.2, 0.2, 0.2))


def test_backend_options_types():
    assert check_backend_options(None) == {}
    assert check_backend_options({"threads": 2, "roi_decode": None}) == {"threads": 2,
                                                                         "roi_decode": None}
    for word in ("no", "False", "off", "1"):
        with pytest.raises(TypeError, match="string"):
            check_backend_options({"threads": word})
    assert check_backend_options({"dct_scaling": "no", "roi_decode": "1"}) == {
        "dct_scaling": False, "roi_decode": True}
    with pytest.raises(ValueError, match="yes/no"):
        check_backend_options({"dct_scaling": "maybe"})
    with pytest.raises(TypeError, match="dict"):
        check_backend_options([("threads", 1)])


def test_ring_memory_is_checked_before_allocating():
    small = {"image": Output((3, 8, 8), np.dtype(np.float32)), "meta": Output((), None)}
    check_ring_memory(4, 16, small, "ds")
    huge = {"image": Output((3, 100_000, 100_000), np.dtype(np.float32))}
    with pytest.raises(ValueError, match=r"need \d+\.\d GiB"):
        check_ring_memory(4, 64, huge, "ds")
