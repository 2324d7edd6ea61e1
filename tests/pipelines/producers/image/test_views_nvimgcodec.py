"""Multi-crop views on the `nvimgcodec` backend (issue 25 item 1, GPU path): its CPU twin against
the cpu backend, and its GPU path run without a GPU: nvImageCodec's CPU decoder stands in for
the GPU decode and the views kernel runs through the host shim (tests/kernels/shim), so what
the backend hands the kernel (one window per sample, every view's box inside it, one launch per
batch, a placeholder for a failed sample) is checked against the CPU twin's pixels."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("nvidia.nvimgcodec")

import chute.kernels  # noqa: E402
import chute.pipelines.producers.image._nvimgcodec as nvimgcodec  # noqa: E402
from chute import ImageOptions, Pipeline, View  # noqa: E402
from chute.pipelines import BatchPlan, ImageSpec, create_producer  # noqa: E402
from chute.readers import DatasetRef, open_dataset  # noqa: E402
from tests.kernels.compare import assert_matches_reference, run_views_shim  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset  # noqa: E402
from tests.pipelines._fake_cuda import FakeStream, fake_cuda  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
VIEWS = [View((20, 28), scale=(0.32, 1.0), count=2), View(12, scale=(0.05, 0.32), count=3)]
CORRUPT = 5
LOG: list = []
STREAM = FakeStream(LOG, 0x5EED)  # the caller's current stream
WORKER_STREAMS: set = set()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("views-nvimgcodec") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=14, sizes=(40, 160), corrupt=(CORRUPT,)))


def collect(dataset, backend, **options):
    image = ImageOptions(views=VIEWS, backend=backend, dtype="float16", **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corrupt sample's substitution is reported
        with Pipeline(dataset, 4, fields={"image": image, "label": None}, device="cpu",
                      seed=3) as pipe:
            return [(b["index"].numpy().copy(), [v.numpy().copy() for v in b["image"]])
                    for b in pipe]


def test_cpu_twin_views_match_the_cpu_backend(dataset):
    cpu = collect(dataset, "cpu", backend_options={"dct_scaling": False, "threads": 1})
    twin = collect(dataset, "nvimgcodec")
    assert len(cpu) == len(twin) > 0
    for (ia, va), (ib, vb) in zip(cpu, twin, strict=True):
        np.testing.assert_array_equal(ia, ib)  # the same substitutes too
        assert [v.shape for v in va] == [v.shape for v in vb] == (
            [(4, 3, 20, 28)] * 2 + [(4, 3, 12, 12)] * 3)
        for a, b in zip(va, vb, strict=True):
            diff = np.abs(to_255_nhwc(a, "float16", "NCHW", MEAN, STD)
                          - to_255_nhwc(b, "float16", "NCHW", MEAN, STD))
            assert diff.mean() <= 1.0


class HostImage:
    """A decoded window in host memory presented as a device array."""

    def __init__(self, pixels: np.ndarray):
        self.pixels = np.ascontiguousarray(pixels)
        self.shape = self.pixels.shape

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "|u1", "data": (self.pixels.ctypes.data, False),
                "strides": None, "version": 3, "stream": None}


class HostDecodingCodec:
    """nvImageCodec whose "GPU" decoder is its CPU-only one, images handed out as HostImage."""

    def __init__(self):
        from nvidia import nvimgcodec as real

        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def Decoder(self, **kwargs):  # noqa: N802 (nvImageCodec's spelling)
        real = self.real
        decoder = real.Decoder(device_id=real.NVIMGCODEC_DEVICE_CPU_ONLY,
                               backends=[real.Backend(real.CPU_ONLY)])

        def decode(streams, images=None, params=None, cuda_stream=None):
            assert cuda_stream in WORKER_STREAMS  # a decode worker's own stream
            return [None if img is None else HostImage(np.asarray(img.cpu()))
                    for img in decoder.decode(streams, params=params)]

        return types.SimpleNamespace(decode=decode)


def _spec(dataset, device, dtype="float16", layout="NCHW", augment="train", options=None):
    crops = tuple(view.crop(augment) for view in VIEWS for _ in range(view.count))
    return ImageSpec("nvimgcodec", "image", dataset, 14, device, options=options or {},
                     size=crops[0].size,
                     dtype=dtype, layout=layout, mean=MEAN, std=STD, crop=crops[0],
                     views=crops, augment=augment)


def _fill(producer, request, make):
    outs = {key: make(shape) for key, shape in producer.shapes(request).items()}
    return producer.fill(request, outs), outs


@pytest.mark.parametrize("dtype, layout, augment, roi_decode", [
    ("float16", "NCHW", "train", True), ("uint8", "NHWC", "train", True),
    ("float32", "NCHW", "eval", True),
    ("float16", "NCHW", "train", False)])  # whole images: a GPU whose nvJPEG is before 13.2
def test_gpu_path_resamples_every_view_in_one_launch_like_the_cpu_twin(dataset, kernel_shim,
                                                                         monkeypatch, dtype,
                                                                         layout, augment,
                                                                         roi_decode):
    twin = create_producer(_spec(dataset, "cpu", dtype, layout, augment))
    plan = BatchPlan(DatasetRef.of(dataset), len(dataset), 3, 1, 0, 1, 7, True, 0,
                     twin.param_sources())
    launches = []

    def views_kernel(sources, boxes, flips, outs, *, layout, mean, std, stream):
        assert stream is STREAM  # the caller's stream
        launches.append(len(outs))
        run_views_shim(kernel_shim, sources, boxes, flips, [o.numpy() for o in outs], layout, mean,
                       std)

    fake_cuda(monkeypatch, nvimgcodec)
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", HostDecodingCodec)
    monkeypatch.setattr(nvimgcodec, "_current_stream", lambda target: STREAM)
    monkeypatch.setattr(chute.kernels, "resize_normalize_views", views_kernel)
    gpu = nvimgcodec.NvImgCodecBackend(_spec(dataset, "cuda:0", dtype, layout, augment,
                                             options={"roi_decode": roi_decode}), device_id=0)
    WORKER_STREAMS.add(gpu._sync.stream.cuda_stream)
    saw_failure, stale_dtype = False, getattr(torch, dtype)
    for k in range(len(plan)):
        request = plan.request(k)
        want_status, want = _fill(twin, request, lambda s: np.zeros(s, dtype))
        # 77: a stale value every good row must overwrite
        status, got = _fill(gpu, request, lambda s: torch.full(s, 77, dtype=stale_dtype))
        assert launches == [5] * (k + 1)  # one launch per batch, for all five views
        np.testing.assert_array_equal(status, want_status)
        good = status == 0
        saw_failure |= not good.all()
        for key in want:
            assert_matches_reference(got[key].numpy()[good], want[key][good])
    gpu.close()
    assert saw_failure  # the placeholder path ran (sample CORRUPT failed in one batch)
