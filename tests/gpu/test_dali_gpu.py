"""DALI backends on a real GPU (marked `gpu`: skipped where no CUDA device exists).

Tolerance as in tests/pipelines/producers/image/test_dali_pipeline.py: mean |difference| per
batch <= 1.0 in 0..255 units against the CPU backend (nvJPEG and libjpeg-turbo round
differently, DALI's resize is not bit-identical to the PIL definition; chute's kernel follows
it exactly, so `dali` differs from `cpu` only by decoder rounding).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset  # noqa: E402

TOLERANCE = 1.0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    pytest.importorskip("nvidia.dali")
    from chute.readers import open_dataset

    path = tmp_path_factory.mktemp("dali_gpu") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=40, sizes=(64, 400)))


def collect(dataset, backend, device, augment="train", **image):
    """`image`: more of the image field's options (size 64 unless given)."""
    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(**{"size": 64, **image, "backend": backend}), "label": None}
    with Pipeline(dataset, 8, fields=fields, augment=augment, device=device, seed=5) as pipe:
        batches = []
        for batch in pipe:
            batches.append({k: (v.cpu().numpy() if hasattr(v, "cpu") else v)
                            for k, v in batch.items()})
        return batches


def assert_close_to_cpu(dataset, backend, **kwargs):
    dtype, layout = kwargs.get("dtype", "float16"), kwargs.get("layout", "NCHW")
    cpu = collect(dataset, "cpu", "cpu", **kwargs)
    gpu = collect(dataset, backend, "cuda", **kwargs)
    assert len(cpu) == len(gpu) > 0
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        # the Pipeline's default normalisation, undone
        diff = np.abs(to_255_nhwc(a["image"], dtype, layout, IMAGENET_MEAN, IMAGENET_STD)
                      - to_255_nhwc(b["image"], dtype, layout, IMAGENET_MEAN, IMAGENET_STD))
        assert diff.mean() <= TOLERANCE


@pytest.mark.parametrize("kwargs", [dict(dtype="float16", layout="NCHW"),
                                    dict(dtype="uint8", layout="NHWC", size=(48, 80)),
                                    dict(dtype="float32", layout="NCHW", augment="eval")])
@pytest.mark.parametrize("backend", ["dali", "dali-native"])
def test_gpu_output_matches_the_cpu_backend(dataset, backend, kwargs):
    assert_close_to_cpu(dataset, backend, **kwargs)


def test_output_is_on_the_gpu_and_a_torch_tensor(dataset):
    import torch

    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(size=32, backend="dali"), "label": None}
    with Pipeline(dataset, 8, fields=fields, device="cuda") as pipe:
        batch = next(iter(pipe))
    assert isinstance(batch["image"], torch.Tensor) and batch["image"].is_cuda
    assert batch["image"].shape == (8, 3, 32, 32) and batch["image"].dtype == torch.float16


@pytest.mark.parametrize("options", [{"staging": "views"}, {"py_workers": 2},
                                     {"hw_decoder_load": 0.0}, {"hw_decoder_load": 1.0}])
def test_options_do_not_change_the_pixels_much(dataset, options):
    base = collect(dataset, "dali", "cuda")
    other = collect(dataset, "dali", "cuda", backend_options=options)
    for a, b in zip(base, other, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        diff = np.abs(a["image"].astype(np.float32) - b["image"].astype(np.float32))
        # staging/workers cannot change a bit; the hardware decoder may round differently
        assert diff.mean() * 255 * 0.226 <= (TOLERANCE if "hw_decoder_load" in options else 0)


def test_stream_ordering_results_equal_a_synchronised_run(dataset):
    """Reading each batch on the consumer's stream right away (no host sync) gives the same
    values as reading after a full device synchronisation: the kernel is ordered after DALI's
    decode, and the Pipeline's event after the kernel."""
    import torch

    from chute import ImageOptions, Pipeline

    eager, synced = [], []
    fields = {"image": ImageOptions(size=64, backend="dali"), "label": None}
    with Pipeline(dataset, 8, fields=fields, device="cuda", seed=9) as pipe:
        for batch in pipe:
            eager.append(batch["image"].float().sum(dim=(1, 2, 3)).cpu())
    with Pipeline(dataset, 8, fields=fields, device="cuda", seed=9) as pipe:
        for batch in pipe:
            torch.cuda.synchronize()
            time.sleep(0.01)
            synced.append(batch["image"].float().sum(dim=(1, 2, 3)).cpu())
    for a, b in zip(eager, synced, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_throughput_smoke(dataset):
    """Runs several epochs end to end (epoch reuse of the DALI pipeline) and reports img/s."""
    import torch

    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(size=224, backend="dali"), "label": None}
    with Pipeline(dataset, 8, fields=fields, device="cuda") as pipe:
        start, images = time.perf_counter(), 0
        for epoch in range(3):
            pipe.set_epoch(epoch)
            for batch in pipe:
                images += batch["image"].shape[0]
                assert torch.isfinite(batch["image"].float()).all()
        torch.cuda.synchronize()
    rate = images / (time.perf_counter() - start)
    print(f"dali backend smoke: {rate:.0f} img/s")
    assert images == 3 * len(pipe) * 8
