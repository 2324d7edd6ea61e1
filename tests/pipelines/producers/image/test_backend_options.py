"""An image backend's `backend_options` dict is parsed once, when the producer is built, into
the backend's own frozen options (issue 39: typed options all the way down): defaults written
once, unknown options refused in one line naming the known ones."""

from __future__ import annotations

import pytest

from chute.pipelines import ImageOptions, ImageSpec, Pipeline, create_producer
from chute.pipelines.producers.image._cpu import CpuDecodeOptions
from chute.readers import open_dataset
from tests.pipelines._dali_data import write_jpeg_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("jpeg"), n=8,
                                           sizes=(24, 48)))


def _spec(dataset, name: str, options: dict) -> ImageSpec:
    return ImageSpec(name, "image", dataset, 4, "cpu", options=options, size=(16, 16))


def test_the_cpu_backends_options_are_parsed_once_with_their_defaults():
    assert CpuDecodeOptions.from_dict({}) == CpuDecodeOptions()
    parsed = CpuDecodeOptions.from_dict({"dct_scaling": "off", "roi_decode": 1, "threads": 2})
    assert (parsed.dct_scaling, parsed.roi_decode, parsed.threads) == (False, True, 2)
    with pytest.raises(ValueError, match=r"backend_options\['roi_decode'\] = 'maybe' is not a "
                                         "yes/no value"):
        CpuDecodeOptions.from_dict({"roi_decode": "maybe"})


def test_an_unknown_cpu_backend_option_is_refused_when_the_producer_is_built(dataset):
    with pytest.raises(ValueError, match=r"^unknown options \['decoders'\] for producer 'cpu'; "
                                         r"it accepts \['dct_scaling', 'max_pixels', "
                                         r"'roi_decode', 'threads'\]$"):
        create_producer(_spec(dataset, "cpu", {"decoders": 2}))


def test_the_cpu_producer_reads_its_parsed_options(dataset):
    producer = create_producer(_spec(dataset, "cpu", {"threads": 3, "dct_scaling": "on",
                                                      "max_pixels": 10_000}))
    try:
        assert (producer.threads, producer.dct_scaling, producer.roi_decode,
                producer.max_pixels) == (3, True, None, 10_000)
    finally:
        producer.close()
    # the Pipeline reports the options as the user spelt them
    image = ImageOptions(size=16, backend="cpu", backend_options={"threads": 1})
    with Pipeline(dataset, 4, fields={"image": image}, device="cpu") as pipe:
        assert pipe.stats.backend_options == {"threads": 1}


def test_the_nvimgcodec_backends_options_are_parsed_once_with_their_defaults():
    from chute.pipelines.producers.image._nvimgcodec_config import (
        DecoderConfig,
        NvImgCodecOptions,
    )

    assert NvImgCodecOptions.from_dict({}) == NvImgCodecOptions()
    assert NvImgCodecOptions().decoder == DecoderConfig()
    parsed = NvImgCodecOptions.from_dict({"roi_decode": False, "decoders": 1,
                                          "gpu_backends": "hw,cuda", "preallocate": "no"})
    assert parsed == NvImgCodecOptions(
        DecoderConfig(decoders=1, gpu_backends=("hw", "cuda"), preallocate=False), False)
    with pytest.raises(ValueError, match=r"^unknown options \['threads'\] for producer "
                                         "'nvimgcodec'; it accepts"):
        NvImgCodecOptions.from_dict({"threads": 2})
    with pytest.raises(ValueError, match="roi_decode must be 'auto' \\(the default\\), True or "
                                         "False, not 'yes'"):
        NvImgCodecOptions.from_dict({"roi_decode": "yes"})
