"""Producers through a Pipeline on CUDA, without DALI (marked `gpu`: skipped where no CUDA
device exists): the cpu backend (pinned staging) and `nvimgcodec` (nvImageCodec decode + chute's
kernel, writing the device tensor itself) deliver the batches the cpu backend delivers on the
CPU, a truncated JPEG included: it is replaced by the same substitute, which the device producer
fills into a device tensor (docs/design.md, "Plans and producers")."""

from __future__ import annotations

import numpy as np
import pytest

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from tests.gpu.test_dali_gpu import TOLERANCE, collect
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset

pytestmark = pytest.mark.gpu

CORRUPT = (5,)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from chute.readers import open_dataset

    path = tmp_path_factory.mktemp("producers_gpu") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=30, sizes=(48, 300), corrupt=CORRUPT))


@pytest.mark.parametrize("augment", ["eval", "train"])
@pytest.mark.parametrize("backend", ["cpu", "nvimgcodec"])
def test_cuda_batches_equal_the_cpu_backends_with_the_same_substitutes(dataset, backend,
                                                                       augment):
    import warnings

    if backend == "nvimgcodec":
        pytest.importorskip("nvidia.nvimgcodec")
    kwargs = dict(size=(40, 56), dtype="float16", layout="NCHW")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corrupt sample's substitution is reported
        cpu = collect(dataset, "cpu", "cpu", augment=augment, **kwargs)
        gpu = collect(dataset, backend, "cuda", augment=augment, **kwargs)
    assert len(cpu) == len(gpu) > 0
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])  # the same substitutes
        assert not set(CORRUPT) & set(b["index"].tolist())
        diff = np.abs(to_255_nhwc(a["image"], "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD)
                      - to_255_nhwc(b["image"], "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD))
        assert diff.mean() <= TOLERANCE


@pytest.mark.parametrize("roi_decode", ["auto", False])
def test_nvimgcodec_asks_only_what_the_gpu_decoders_alone_decode(dataset, roi_decode):
    # nvImageCodec decodes what its GPU decoders refuse (4:2:0 windows before nvJPEG 13.2) with
    # libjpeg-turbo on the CPU, silently: the first GPU run found its 4:2:0 windows going there
    import torch

    codec = pytest.importorskip("nvidia.nvimgcodec")
    from chute.pipelines import ImageSpec, create_producer
    from tests.pipelines._plans import image_plan

    spec = ImageSpec("nvimgcodec", "image", dataset, 10, "cuda:0",
                     options={"roi_decode": roi_decode}, size=(40, 56), dtype="float16")
    producer = create_producer(spec)
    producer._decoder = codec.Decoder(device_id=0, backends=[
        codec.Backend(codec.GPU_ONLY), codec.Backend(codec.HW_GPU_ONLY),
        codec.Backend(codec.HYBRID_CPU_GPU)])
    plan = image_plan(dataset, (40, 56), batch_size=10, drop_last=False, mode="train")
    for k in range(len(plan)):
        request = plan.request(k)
        out = torch.zeros(spec.image_shape(len(request.ids)), dtype=torch.half, device="cuda:0")
        status = producer.fill(request, {"image": out})
        assert (status != 0).tolist() == [int(i) in CORRUPT for i in request.ids], \
            producer.roi_reason
