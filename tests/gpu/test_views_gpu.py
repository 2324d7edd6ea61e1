"""Multi-crop views on a real GPU (issue 25 item 1; marked `gpu`: skipped where there is no CUDA
device): the views kernel against the one-view kernel and the NumPy reference, and a Pipeline
with views on the `nvimgcodec` and `dali` backends against the cpu backend's views, one kernel
launch per batch for all views (docs/views.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute._output_types import image_batch_shape, torch_dtype
from tests._reference_resize import reference_batch
from tests.gpu.test_dali_gpu import TOLERANCE
from tests.kernels.cases import make_batch, view_boxes
from tests.kernels.compare import assert_matches_reference
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset

pytestmark = pytest.mark.gpu

VIEW_SIZES = [(24, 32), (24, 32), (7, 5), (33, 31), (1, 1)]
CORRUPT = (5,)


def _device_sources(cupy, padded):
    """CuPy copies of the test images, keeping the wider row pitch of padded cases."""
    sources = []
    for image in padded:
        store = cupy.asarray(image.base if image.base is not None else image)
        sources.append(store[:, : image.shape[1]])
    return sources


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32])
def test_views_kernel_matches_the_one_view_kernel_and_the_reference(dtype, layout):
    import torch

    from chute.kernels import resize_normalize, resize_normalize_views

    cupy = pytest.importorskip("cupy")
    images, padded, _, _ = make_batch(seed=6)
    boxes, flips = view_boxes(images, len(VIEW_SIZES), seed=1)
    sources = _device_sources(cupy, padded)

    def empty(h, w):
        out = torch.empty(image_batch_shape(len(images), h, w, layout),
                          dtype=torch_dtype(dtype), device="cuda")
        return out.fill_(77)  # a stale value the kernel must overwrite

    outs = [empty(h, w) for h, w in VIEW_SIZES]
    stream = torch.cuda.current_stream()
    resize_normalize_views(sources, boxes, flips, outs, layout=layout, stream=stream)
    alone = [empty(h, w) for h, w in VIEW_SIZES]
    for v, out in enumerate(alone):
        resize_normalize(sources, boxes[:, v], flips[:, v], out, layout=layout, stream=stream)
    stream.synchronize()
    for v, (h, w) in enumerate(VIEW_SIZES):
        got = outs[v].cpu().numpy()
        assert_matches_reference(got, alone[v].cpu().numpy())
        want = reference_batch(images, boxes[:, v], flips[:, v], h, w, dtype, layout,
                               IMAGENET_MEAN, IMAGENET_STD)
        assert_matches_reference(got, want)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from chute.readers import open_dataset

    path = tmp_path_factory.mktemp("views_gpu") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=30, sizes=(48, 300), corrupt=CORRUPT))


def _collect(dataset, backend, device, **image):
    from chute import ImageOptions, Pipeline, View

    views = [View(64, scale=(0.32, 1.0), count=2), View(24, scale=(0.05, 0.32), count=6)]
    fields = {"image": ImageOptions(views=views, backend=backend, dtype="float16", **image),
              "label": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corrupt sample's substitution is reported
        with Pipeline(dataset, 8, fields=fields, device=device, seed=5) as pipe:
            out = []
            for batch in pipe:
                assert all(v.device.type == device for v in batch["image"])
                out.append((batch["index"].cpu().numpy(),
                            [v.cpu().numpy() for v in batch["image"]]))
            return out


@pytest.mark.parametrize("backend, module, options", [
    ("nvimgcodec", "nvidia.nvimgcodec", None),
    ("nvimgcodec", "nvidia.nvimgcodec", {"roi_decode": False}),  # whole images (nvJPEG < 13.2)
    ("dali", "nvidia.dali", None)])
def test_pipeline_views_on_the_gpu_equal_the_cpu_backends_in_one_launch_per_batch(
        dataset, monkeypatch, backend, module, options):
    pytest.importorskip(module)
    import chute.kernels

    launches = []
    views_kernel = chute.kernels.resize_normalize_views

    def counted(*args, **kwargs):
        launches.append(len(args[3]))
        return views_kernel(*args, **kwargs)

    def one_view(*args, **kwargs):
        raise AssertionError("views must not go through the one-view kernel")

    monkeypatch.setattr(chute.kernels, "resize_normalize_views", counted)
    monkeypatch.setattr(chute.kernels, "resize_normalize", one_view)
    cpu = _collect(dataset, "cpu", "cpu", backend_options={"dct_scaling": False})
    gpu = _collect(dataset, backend, "cuda", backend_options=options)
    assert len(cpu) == len(gpu) > 0
    # one launch of all 8 views per batch (nvimgcodec: plus one per substitution fill of a
    # failed sample; dali: minus the batch its CPU recovery decodes)
    assert set(launches) == {8}
    assert len(gpu) - len(CORRUPT) <= len(launches) <= len(gpu) + len(CORRUPT)
    for (ia, va), (ib, vb) in zip(cpu, gpu, strict=True):
        np.testing.assert_array_equal(ia, ib)  # the same crops' samples, the same substitutes
        assert not set(CORRUPT) & set(ib.tolist())
        for a, b in zip(va, vb, strict=True):
            assert a.shape == b.shape
            diff = np.abs(to_255_nhwc(a, "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD)
                          - to_255_nhwc(b, "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD))
            assert diff.mean() <= TOLERANCE


def test_auto_takes_a_gpu_backend_for_views_where_one_runs(dataset):
    # the lent GPU machines have nvImageCodec but no DALI: "auto" must still leave the CPU
    # (issue 25: backend="auto" for views on a GPU; docs/views.md, "Backends")
    from chute import ImageOptions, Pipeline, View
    from chute.pipelines.producers.image._auto import views_backend

    name, reason = views_backend("cuda:0")
    if name == "cpu":
        pytest.skip(f"no GPU views backend can run here: {reason}")
    views = [View(64, scale=(0.32, 1.0), count=2), View(24, scale=(0.05, 0.32), count=6)]
    fields = {"image": ImageOptions(views=views, dtype="float16"), "label": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corrupt sample's substitution is reported
        with Pipeline(dataset, 8, fields=fields, device="cuda", seed=5) as pipe:
            auto = [(b["index"].cpu().numpy(), [v.cpu().numpy() for v in b["image"]])
                    for b in pipe]
            assert pipe.stats.backend == name, pipe.stats.backend_reason
    named = _collect(dataset, name, "cuda")
    assert len(auto) == len(named) > 0
    for (ia, va), (ib, vb) in zip(auto, named, strict=True):
        np.testing.assert_array_equal(ia, ib)
        for a, b in zip(va, vb, strict=True):
            # a GPU decoder may split a batch between its hardware and CUDA decoders
            diff = np.abs(to_255_nhwc(a, "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD)
                          - to_255_nhwc(b, "float16", "NCHW", IMAGENET_MEAN, IMAGENET_STD))
            assert diff.mean() <= TOLERANCE
