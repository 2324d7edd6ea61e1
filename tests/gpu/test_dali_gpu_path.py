"""The review's GPU cases on a real GPU (marked `gpu`: skipped where no CUDA device exists):
mixed decode -> kernel at the borders, a short last batch, a second device, grayscale / CMYK /
progressive JPEGs, EXIF-rotated JPEGs, an early break, and a ring-of-1 negative control."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from tests._datasets import write_samples  # noqa: E402
from tests._media import jpeg, smooth_image  # noqa: E402
from tests.gpu.test_dali_gpu import TOLERANCE, collect  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc  # noqa: E402

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32"}


def dataset_of(path, payloads_and_sizes):
    from chute.readers import open_dataset

    samples = ({"image": p, "label": i, "height": h, "width": w}
               for i, (p, h, w) in enumerate(payloads_and_sizes))
    return open_dataset(write_samples(path, FIELDS, samples))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """RGB 4:2:0 / 4:4:4, greyscale, CMYK, progressive and EXIF-rotated JPEGs, 27 samples."""
    from PIL import Image

    rng = np.random.default_rng(3)
    payloads = []
    for i in range(27):
        h, w = (int(v) for v in rng.integers(70, 300, size=2))
        kind = i % 6
        if kind == 0:
            payload = jpeg(h, w, seed=i)
        elif kind == 1:
            payload = jpeg(h, w, seed=i, subsampling=0)
        elif kind == 2:
            payload = jpeg(h, w, seed=i, mode="L")
        elif kind == 3:
            payload = jpeg(h, w, seed=i, mode="CMYK")
        elif kind == 4:
            payload = jpeg(h, w, seed=i, progressive=True)
        else:
            import io

            exif = Image.Exif()
            exif[0x0112] = 6
            buffer = io.BytesIO()
            Image.fromarray(smooth_image(h, w, i)).save(buffer, "JPEG", exif=exif.tobytes())
            payload = buffer.getvalue()
        payloads.append((payload, h, w))
    return dataset_of(tmp_path_factory.mktemp("mixed") / "ds.chute", payloads)


def needs(backend: str) -> None:
    """Skip unless the library of `backend` imports (nvimgcodec runs without DALI)."""
    pytest.importorskip("nvidia.nvimgcodec" if backend == "nvimgcodec" else "nvidia.dali")


def differences(dataset, backend, device="cuda", **kwargs):
    needs(backend)
    dtype, layout = kwargs.get("dtype", "float32"), kwargs.get("layout", "NHWC")
    kwargs.update(dtype=dtype, layout=layout)
    cpu = collect(dataset, "cpu", "cpu", **kwargs)
    gpu = collect(dataset, backend, device, **kwargs)
    assert len(cpu) == len(gpu) > 0
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        yield np.abs(to_255_nhwc(a["image"], dtype, layout, IMAGENET_MEAN, IMAGENET_STD)
                     - to_255_nhwc(b["image"], dtype, layout, IMAGENET_MEAN, IMAGENET_STD))


@pytest.mark.parametrize("backend", ["dali", "dali-native", "nvimgcodec"])
def test_every_jpeg_kind_matches_the_cpu_backend(mixed, backend):
    for diff in differences(mixed, backend, size=(40, 56)):
        assert diff.mean() <= TOLERANCE


@pytest.mark.parametrize("backend", ["dali", "nvimgcodec"])
def test_border_pixels_match_the_cpu_backend(mixed, backend):
    """The ROI window carries the resample's margin: border rows/columns are no worse than the
    interior (decoder rounding only)."""
    for diff in differences(mixed, backend, size=(32, 32)):
        border = max(diff[:, [0, -1]].mean(), diff[:, :, [0, -1]].mean())
        assert border <= TOLERANCE


def test_short_last_batch(mixed):
    needs("dali")
    batches = collect(mixed, "dali", "cuda", size=24, augment="eval")
    ids = np.concatenate([b["index"] for b in batches])
    assert sorted(ids.tolist()) == list(range(len(mixed)))
    assert batches[-1]["image"].shape[0] == len(mixed) % 8


def test_second_device(mixed):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    for diff in differences(mixed, "dali", device="cuda:1", size=24):
        assert diff.mean() <= TOLERANCE


def test_early_break_then_close_leaves_no_pending_work(mixed):
    import torch

    from chute import ImageOptions, Pipeline

    needs("dali")
    fields = {"image": ImageOptions(size=64, backend="dali"), "label": None}
    with Pipeline(mixed, 8, fields=fields, device="cuda", seed=2) as pipe:
        for first in pipe:
            first = first["image"].clone()
            break
    torch.cuda.synchronize()  # raises on an illegal access left behind by the closed run
    with Pipeline(mixed, 8, fields=fields, device="cuda", seed=2) as pipe:
        again = next(iter(pipe))["image"]
    torch.testing.assert_close(first, again, rtol=0, atol=0)


def test_ring_of_one_is_detected(mixed, monkeypatch):
    """Negative control of the pinned staging ring: with one slot the next batch overwrites
    bytes the mixed decoder may still read, which these comparisons must be able to notice."""
    from chute.pipelines.producers.image import _dali as _backend_dali

    original = _backend_dali.DaliBackend.make_source

    def ring_of_one(self, plan, first_iteration):
        source = original(self, plan, first_iteration)
        source.ring = 1
        source.__post_init__()
        return source

    monkeypatch.setattr(_backend_dali.DaliBackend, "make_source", ring_of_one)
    worst = max(float(diff.mean()) for diff in differences(mixed, "dali", size=32))
    if worst <= TOLERANCE:
        pytest.skip("the staging race did not show on this GPU this time")
    assert worst > TOLERANCE
