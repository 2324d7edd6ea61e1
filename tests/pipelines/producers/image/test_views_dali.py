"""Multi-crop views on the `dali` backend (issue 25 item 1, GPU path), run on the CPU: the
decode-only DALI graph (the GPU graph with device="cpu") decodes one window per sample holding
every view's margin, and the views kernel, run through the host shim (tests/kernels/shim),
resamples all views of a batch in one launch. Compared with the cpu backend's views; a corrupt
sample (DALI fails its batch) is recovered by the CPU decoder's views."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("nvidia.dali")

import chute.kernels  # noqa: E402
from chute import View  # noqa: E402
from chute.pipelines import BatchPlan, ImageSpec, create_producer  # noqa: E402
from chute.pipelines.producers.image._dali import DaliBackend, DaliOptions  # noqa: E402
from chute.readers import DatasetRef, open_dataset  # noqa: E402
from tests.kernels.compare import CpuAsCuda, run_views_shim  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
VIEWS = [View((20, 28), scale=(0.32, 1.0), count=2), View(12, scale=(0.05, 0.32), count=3)]
CORRUPT = 5


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("views-dali") / "ds.chute"
    # the corrupt sample is whole but names a quantisation table it lacks: DALI's decoder,
    # not the header check (which refuses truncated files), fails it: its batch takes the CPU
    # recovery
    return open_dataset(write_jpeg_dataset(path, n=18, sizes=(40, 160), corrupt=(CORRUPT,),
                                           damage="bad-table"))


def _spec(dataset, name, dtype, layout):
    crops = tuple(view.crop("train") for view in VIEWS for _ in range(view.count))
    return ImageSpec(name, "image", dataset, 6, "cpu", options={}, size=crops[0].size,
                     dtype=dtype, layout=layout, mean=MEAN, std=STD, crop=crops[0],
                     views=crops)


@pytest.mark.parametrize("dtype, layout", [("float16", "NCHW"), ("uint8", "NHWC")])
def test_dali_views_in_one_launch_match_the_cpu_backends(dataset, kernel_shim, monkeypatch, dtype,
                                                         layout):
    launches = []

    def views_kernel(sources, boxes, flips, outs, *, layout, mean, std, stream):
        assert stream == "the caller's stream"
        launches.append(len(outs))
        run_views_shim(kernel_shim, [CpuAsCuda(s) for s in sources], boxes, flips, outs, layout,
                       mean, std)

    monkeypatch.setattr(chute.kernels, "resize_normalize_views", views_kernel)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: "the caller's stream")
    cpu = create_producer(_spec(dataset, "cpu", dtype, layout))
    cpu.dct_scaling = False  # the full-size decode DALI's windows are cut from
    plan = BatchPlan(DatasetRef.of(dataset), len(dataset), 4, 0, 0, 1, 6, True, 0,
                     cpu.param_sources())
    # the GPU graph's decode (variant "kernel") on the CPU: device_id None
    dali = DaliBackend(_spec(dataset, "dali", dtype, layout), "kernel", None, DaliOptions())
    epoch = dali.open_epoch(plan, 0)
    recovered = 0
    for k in range(len(plan)):
        request = plan.request(k)
        shapes = cpu.shapes(request)
        want = {key: np.zeros(shape, dtype) for key, shape in shapes.items()}
        want_status = cpu.fill(request, want)
        got = {key: np.full(shape, 77, dtype) for key, shape in shapes.items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = epoch.read(request, got)
        np.testing.assert_array_equal(status, want_status)
        good = status == 0
        recovered += int(not good.all())
        assert any("could not decode" in str(w.message) for w in caught) == (not good.all())
        for key in want:
            diff = np.abs(to_255_nhwc(got[key][good], dtype, layout, MEAN, STD)
                          - to_255_nhwc(want[key][good], dtype, layout, MEAN, STD))
            if good.all():  # DALI decoded the windows: the same pixels, up to output rounding
                assert diff.max() <= 1.0
            else:  # recovered by the cpu backend with its defaults (DCT scaling in train)
                assert diff.mean() <= 1.0
    epoch.close()
    assert recovered == 1  # the corrupt sample's batch went through the CPU recovery
    assert launches == [5] * (len(plan) - recovered)  # one launch per DALI batch, all views
