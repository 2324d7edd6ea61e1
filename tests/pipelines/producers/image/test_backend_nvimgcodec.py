"""The `nvimgcodec` backend's CPU twin (nvImageCodec's CPU-only decoder + the shared resample)
against the cpu backend, and its candidate on machines that cannot run it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("nvidia.nvimgcodec")

from chute import View  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("nvimgcodec") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=14, corrupt=(5,)))


def collect(dataset, backend, augment="train", **image):
    import warnings

    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(backend=backend, **image), "label": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the corrupt sample's substitution is reported
        with Pipeline(dataset, 4, fields=fields, augment=augment, device="cpu", seed=8) as pipe:
            return [{k: [t.numpy().copy() for t in v] if isinstance(v, list)  # views
                     else v.numpy().copy() for k, v in b.items()} for b in pipe]


@pytest.mark.parametrize("kwargs", [dict(size=32, dtype="float16", layout="NCHW"),
                                    dict(size=(20, 36), dtype="uint8", layout="NHWC",
                                         augment="eval")])
def test_cpu_twin_matches_the_cpu_backend(dataset, kwargs):
    cpu = collect(dataset, "cpu", **kwargs)
    twin = collect(dataset, "nvimgcodec", **kwargs)
    assert len(cpu) == len(twin) > 0
    for a, b in zip(cpu, twin, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])  # the same substitutes too
        diff = np.abs(to_255_nhwc(a["image"], kwargs["dtype"], kwargs["layout"], MEAN, STD)
                      - to_255_nhwc(b["image"], kwargs["dtype"], kwargs["layout"], MEAN, STD))
        assert diff.mean() <= 1.0


def test_corrupt_sample_gets_a_status(dataset):
    from chute.pipelines import ImageSpec, create_producer
    from tests.pipelines._plans import image_plan

    spec = ImageSpec("nvimgcodec", "image", dataset, 4, "cpu", options={}, size=(16, 16),
                     dtype="uint8", layout="NHWC", mean=MEAN, std=STD)
    producer = create_producer(spec)
    plan = image_plan(dataset, (16, 16), batch_size=14, drop_last=False, mode="eval")
    request = plan.request(0)
    out = np.zeros(spec.image_shape(len(request.ids)), dtype=np.uint8)
    status = producer.fill(request, {"image": out})
    assert (status != 0).tolist() == [int(i) == 5 for i in request.ids]


def test_candidate_is_listed_unavailable_without_a_gpu():
    from chute._device import cuda_device_count
    from chute.pipelines.producers.image._nvimgcodec import candidates

    if cuda_device_count():
        pytest.skip("this machine has a GPU: the candidate may be available")

    found = candidates("cuda")
    assert len(found) == 6  # the decoder configurations of candidate_grid()
    for candidate in found:
        assert candidate.backend == "nvimgcodec"
        assert not candidate.available and candidate.reason


@pytest.mark.parametrize("image", [
    dict(size=32, dtype="float32"),
    dict(views=[View(32, scale=(0.3, 1.0), count=2), View(16, scale=(0.05, 0.3), count=3)],
         dtype="float32"),
], ids=["one crop", "views"])
def test_whole_image_decodes_give_the_batches_of_window_decodes(dataset, image):
    # roi_decode=False is what a GPU whose nvJPEG refuses 4:2:0 windows runs (docs/images.md)
    windows = collect(dataset, "nvimgcodec", backend_options={"roi_decode": True}, **image)
    whole = collect(dataset, "nvimgcodec", backend_options={"roi_decode": False}, **image)
    assert len(windows) == len(whole) > 0
    for a, b in zip(windows, whole, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        first = a["image"] if isinstance(a["image"], list) else [a["image"]]
        second = b["image"] if isinstance(b["image"], list) else [b["image"]]
        assert len(first) == len(second) == (5 if "views" in image else 1)
        for x, y in zip(first, second, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-4)
