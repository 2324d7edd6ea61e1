"""DALI backends on a machine without a GPU: the graph in DALI's CPU-only mode, fail-fast errors.

Tolerance: DALI's antialiased linear resize and its ROI JPEG decode are not bit-identical to PIL
(the shared resize definition #3). On these images the mean absolute difference is ~0.2 (uint8
units) and single pixels differ by up to ~13 under strong upscaling, so we require a mean
absolute difference <= 1.0 in 0..255 units for every batch (float outputs are de-normalised).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("nvidia.dali")

from chute._device import cuda_device_count  # noqa: E402
from chute.errors import BackendUnavailableError  # noqa: E402
from chute.pipelines import ImageSpec  # noqa: E402
from chute.pipelines import create_producer as create_backend  # noqa: E402
from chute.pipelines.producers._dali._graph import DaliGraphConfig, build_dali_pipeline  # noqa: E402
from chute.pipelines.producers.image._dali_source import DaliBatchSource  # noqa: E402
from chute.pipelines.sampling._plan import BatchPlan  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests.pipelines._dali_data import pil_reference, to_255_nhwc, write_jpeg_dataset  # noqa: E402
from tests.pipelines._plans import image_batch, image_plan  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOLERANCE = 1.0  # mean |difference| per batch, 0..255 units


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("dali") / "ds.chute"))


def make_plan(dataset, size, mode="train", epoch=0, batch_size=6) -> BatchPlan:
    return image_plan(dataset, size, seed=3, epoch=epoch, batch_size=batch_size,
                      drop_last=mode == "train", mode=mode)


def make_spec(dataset, size, dtype="float16", layout="NCHW", name="dali-native",
              device="cpu", options=None) -> ImageSpec:
    return ImageSpec(name, "image", dataset, 6, device, options=options or {}, size=size,
                     dtype=dtype, layout=layout, mean=MEAN, std=STD)


def read_epoch(backend, plan, spec, first_iteration=0):
    epoch = backend.open_epoch(plan, first_iteration)
    for it in range(first_iteration, len(plan)):
        ids, boxes, flips = image_batch(plan, it)
        out = np.full(spec.image_shape(len(ids)), 77, dtype=spec.numpy_dtype)
        status = epoch.read(plan.request(it), {"image": out})
        yield it, ids, boxes, flips, out, status


@pytest.mark.parametrize(
    "size, mode, dtype, layout",
    [((32, 32), "train", "uint8", "NHWC"), ((24, 40), "train", "float16", "NCHW"),
     ((160, 160), "train", "float32", "NHWC"), ((48, 40), "eval", "float16", "NCHW")],
)
def test_cpu_mode_graph_matches_the_resize_definition(dataset, size, mode, dtype, layout):
    spec = make_spec(dataset, size, dtype, layout)
    plan = make_plan(dataset, size, mode)
    backend = create_backend(spec)
    assert backend.output_on_device is False
    batches = 0
    for _, ids, boxes, flips, out, status in read_epoch(backend, plan, spec):
        assert not status.any()
        got = to_255_nhwc(out, dtype, layout, MEAN, STD)
        want = pil_reference(dataset, ids, boxes, flips, size).astype(np.float64)
        assert np.abs(got - want).mean() <= TOLERANCE
        batches += 1
    backend.close()
    assert batches == len(plan) > 0


def test_mirror_is_applied_per_sample(dataset):
    """A wrong flip would give a large difference: check the flipped samples individually."""
    size = (32, 32)
    spec = make_spec(dataset, size, "uint8", "NHWC")
    plan = make_plan(dataset, size)
    backend = create_backend(spec)
    seen = set()
    for _, ids, boxes, flips, out, _ in read_epoch(backend, plan, spec):
        ref = pil_reference(dataset, ids, boxes, flips, size).astype(float)
        for k, flip in enumerate(flips):
            same = np.abs(out[k] - ref[k]).mean()
            mirrored = np.abs(out[k][:, ::-1] - ref[k]).mean()
            assert same <= TOLERANCE < mirrored
            seen.add(bool(flip))
    backend.close()
    assert seen == {True, False}


def test_consecutive_epochs_reuse_the_pipeline_and_follow_the_plan(dataset):
    size = (16, 16)
    spec = make_spec(dataset, size)
    backend = create_backend(spec)
    for epoch in range(3):
        plan = make_plan(dataset, size, epoch=epoch)
        delivered = [(out, status) for *_, out, status in read_epoch(backend, plan, spec)]
        assert len(delivered) == len(plan)
        # every batch decoded and written (read() itself raises if DALI's ids leave the plan)
        assert all(not status.any() and not np.all(out == 77) for out, status in delivered)
        if epoch:
            assert backend._finished.epoch_idx == epoch  # reset + reused, not rebuilt
    backend.close()


def test_resume_mid_epoch_starts_at_the_asked_iteration(dataset):
    size = (16, 16)
    spec = make_spec(dataset, size)
    backend = create_backend(spec)
    plan = make_plan(dataset, size)
    resumed = {it: out for it, *_, out, _ in read_epoch(backend, plan, spec, first_iteration=2)}
    assert list(resumed) == list(range(2, len(plan)))
    full = {it: out for it, *_, out, _ in read_epoch(backend, plan, spec)}
    for it, out in resumed.items():  # the same pixels as iteration `it` of an uninterrupted epoch
        np.testing.assert_array_equal(out, full[it])
    epoch = backend.open_epoch(plan, 0)
    with pytest.raises(Exception, match="in order"):
        request = plan.request(1)
        epoch.read(request, {"image": np.empty(spec.image_shape(len(request.ids)), np.float16)})
    backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_parallel_external_source_gives_the_same_batches(dataset, start_method):
    size = (24, 24)
    plain = make_spec(dataset, size)
    parallel = make_spec(dataset, size,
                         options={"py_workers": 1, "py_start_method": start_method})
    plan = make_plan(dataset, size)
    outs = []
    for spec in (plain, parallel):
        backend = create_backend(spec)
        outs.append([out.copy() for *_, out, _ in read_epoch(backend, plan, spec)])
        backend.close()
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_dali_checkpoint_restores_the_external_source_position(dataset):
    size = (16, 16)
    plan = make_plan(dataset, size)
    config = DaliGraphConfig("native", 6, size, enable_checkpointing=True)
    pipe = build_dali_pipeline(DaliBatchSource(plan, with_roi=True), config)
    pipe.run()
    checkpoint = pipe.checkpoint()
    del pipe
    restored = build_dali_pipeline(DaliBatchSource(plan, with_roi=True), config,
                                   checkpoint=checkpoint)
    images, index = restored.run()
    np.testing.assert_array_equal(np.asarray(index.as_array()).ravel(), image_batch(plan, 1)[0])


@pytest.mark.slow
def test_corrupt_sample_gets_a_status_and_the_epoch_goes_on(tmp_path):
    clean = open_dataset(write_jpeg_dataset(tmp_path / "clean.chute", n=24))
    size = (16, 16)
    plan = make_plan(clean, size, batch_size=4)
    bad = int(image_batch(plan, 2)[0][1])
    # past the header check (whole, an undefined table): DALI's decoder fails the sample
    broken = open_dataset(write_jpeg_dataset(tmp_path / "bad.chute", n=24, corrupt=(bad,),
                                             damage="bad-table"))
    plan = make_plan(broken, size, batch_size=4)
    spec = ImageSpec("dali-native", "image", broken, 4, "cpu", size=size, dtype="uint8",
                     layout="NHWC", mean=MEAN, std=STD)
    backend = create_backend(spec)
    with pytest.warns(UserWarning, match=str(bad)):
        results = list(read_epoch(backend, plan, spec))
    backend.close()
    assert len(results) == len(plan)
    for it, ids, boxes, flips, out, status in results:
        np.testing.assert_array_equal(status != 0, ids == bad)
        good = status == 0
        ref = pil_reference(broken, ids[good], boxes[good], flips[good], size)
        assert np.abs(out[good].astype(float) - ref).mean() <= TOLERANCE, it


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_dali_on_cuda_without_a_device_fails_fast(dataset):
    for name in ("dali", "dali-native"):
        with pytest.raises(BackendUnavailableError, match="no CUDA device is available"):
            create_backend(make_spec(dataset, (32, 32), name=name, device="cuda"))


def test_dali_kernel_backend_on_cpu_points_to_dali_native(dataset):
    with pytest.raises(BackendUnavailableError, match="dali-native"):
        create_backend(make_spec(dataset, (32, 32), name="dali", device="cpu"))


def test_unknown_backend_options_are_named(dataset):
    with pytest.raises(ValueError, match="hw_decode_load"):
        create_backend(make_spec(dataset, (32, 32), options={"hw_decode_load": 0.5}))


def test_kernel_writer_hands_the_crop_inside_the_roi_and_the_plan_flips_to_the_kernel(
        dataset, monkeypatch):
    """The `dali` backend's wiring, run on the CPU: the decode-only graph (the GPU graph with
    device="cpu") feeds KernelWriter; a stand-in for chute.kernels.resize_normalize applies the
    shared resize definition with PIL to exactly what the real kernel would receive."""
    import sys
    import types

    from PIL import Image

    import chute.kernels
    from chute.pipelines.producers._dali._output import KernelWriter

    calls = []

    def fake_kernel(sources, boxes, flips, out, *, layout, mean, std, stream):
        calls.append((layout, mean, std, stream))
        height, width = out.shape[1:3]
        for k, src in enumerate(sources):
            y0, x0, h, w = (float(v) for v in boxes[k])
            pixels = np.asarray(src)
            # the crop lies inside the decoded window (which adds the resample's margin)
            assert 0 <= y0 and 0 <= x0 and y0 + h <= pixels.shape[0] and x0 + w <= pixels.shape[1]
            img = Image.fromarray(pixels).resize((width, height), Image.BILINEAR,
                                                 box=(x0, y0, x0 + w, y0 + h))
            out[k] = np.asarray(img)[:, ::-1] if flips[k] else np.asarray(img)

    fake_torch = types.SimpleNamespace(
        dtype=type("dtype", (), {}),
        cuda=types.SimpleNamespace(current_stream=lambda device: "caller-stream"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(chute.kernels, "resize_normalize", fake_kernel)
    size = (32, 32)
    plan = make_plan(dataset, size)
    source = DaliBatchSource(plan, margin_for=size)
    pipe = build_dali_pipeline(source, DaliGraphConfig("kernel", 6, size))
    writer = KernelWriter(MEAN, STD, "NHWC")
    for it in range(len(plan)):
        ids, boxes, flips = image_batch(plan, it)
        crops, _, index = pipe.run()
        np.testing.assert_array_equal(np.asarray(index.as_array()).ravel(), ids)
        out = np.zeros((len(ids), *size, 3), dtype=np.uint8)
        writer.write(crops, source.windows(ids, boxes)[1], flips, out)
        want = pil_reference(dataset, ids, boxes, flips, size).astype(float)
        assert np.abs(out - want).mean() <= TOLERANCE
    assert calls and all(call == ("NHWC", MEAN, STD, "caller-stream") for call in calls)


@pytest.fixture
def cupy_hidden(monkeypatch):
    """`import cupy` fails, as on a machine with DALI but without CuPy."""
    import sys

    for name in ("cupy", "cupyx"):
        monkeypatch.setitem(sys.modules, name, None)


def test_without_cupy_the_probe_marks_dali_unavailable_and_native_stages_views(
        dataset, monkeypatch, cupy_hidden):
    from chute import _device
    from chute.pipelines.producers.image import _dali as _backend_dali
    from chute.pipelines.producers.image._dali_source import CUPY_INSTALL_HINT, staging_for

    monkeypatch.setattr(_device, "cuda_device_count", lambda: 1)  # a GPU machine, probed
    found = _backend_dali.candidates("cuda")
    kernel = [c for c in found if c.backend == "dali"]
    native = [c for c in found if c.backend == "dali-native"]
    assert kernel and all(not c.available and "cupy" in c.reason.lower() for c in kernel)
    assert native and all(c.available for c in native)
    assert staging_for("pinned", on_gpu=True) == "views"  # no pinned allocator: DALI copies
    assert "pip install chute[dali]" in CUPY_INSTALL_HINT


def test_with_cupy_importable_pinned_staging_is_kept():
    pytest.importorskip("cupy")
    from chute.pipelines.producers.image._dali_source import staging_for

    assert staging_for("pinned", on_gpu=True) == "pinned"
    assert staging_for("pinned", on_gpu=False) == "views"
