"""The `nvimgcodec` backend's GPU path without a GPU: a fake nvImageCodec and fake CUDA streams
and events (tests/pipelines/_fake_cuda.py) record what the backend asks of them. Each decode
worker decodes on its own stream; the kernel runs on the caller's current stream after waiting
for that decode, and the images it hands the kernel name the worker's stream in their
`__cuda_array_interface__` (docs/pipeline.md, "Batches in flight")."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import chute.kernels
import chute.pipelines.producers.image._nvimgcodec as nvimgcodec
from chute.errors import BackendUnavailableError
from chute.kernels import stream_pointer
from chute.kernels._plan import pending_streams, source_views
from chute.pipelines import ImageSpec
from chute.readers import open_dataset
from tests.pipelines._dali_data import write_jpeg_dataset
from tests.pipelines._fake_cuda import FakeStream, fake_cuda
from tests.pipelines._plans import image_plan

KERNEL_STREAM = 0x5EED


class FakeImage:
    """A decoded window in "device memory" (here: host memory), on the decode's stream."""

    def __init__(self, height, width, stream):
        self.pixels = np.zeros((height, width, 3), np.uint8)
        self.shape = self.pixels.shape
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "|u1", "data": (self.pixels.ctypes.data, False),
                "strides": None, "version": 3, "stream": self.stream or 1}


class FakeCodec:
    """The calls of `nvidia.nvimgcodec` the backend makes; `decode` keeps its keywords."""

    NVIMGCODEC_DEVICE_CPU_ONLY, CPU_ONLY = -99, "cpu-only"
    GPU_ONLY, HW_GPU_ONLY, HYBRID_CPU_GPU = "gpu", "hw", "hybrid"
    ColorSpec = types.SimpleNamespace(SRGB="srgb")

    def __init__(self):
        self.decodes: list[dict] = []

    def Backend(self, kind, load_hint=1.0):  # noqa: N802 (nvImageCodec's spelling)
        return kind

    def DecodeParams(self, **kwargs):  # noqa: N802
        return kwargs

    def Region(self, start_y, start_x, end_y, end_x):  # noqa: N802
        return (end_y - start_y, end_x - start_x)

    def CodeStream(self, data):  # noqa: N802
        return types.SimpleNamespace(
            get_sub_code_stream=lambda region: types.SimpleNamespace(size=region))

    def Decoder(self, **kwargs):  # noqa: N802
        codec = self

        class Decoder:
            def decode(self, streams, images=None, params=None, cuda_stream=None):
                codec.decodes.append({"params": params, "cuda_stream": cuda_stream})
                return [FakeImage(*s.size, cuda_stream) for s in streams]

        return Decoder()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("nvimg") / "ds.chute", n=6))


def test_the_gpu_path_decodes_on_its_worker_stream_and_the_kernel_waits_for_it(dataset,
                                                                              monkeypatch):
    codec = FakeCodec()
    log = fake_cuda(monkeypatch, nvimgcodec)
    launches = []

    def resize_normalize(sources, boxes, flips, out, *, stream, **kwargs):
        views = source_views(sources)
        launches.append((stream_pointer(stream), pending_streams(views, stream_pointer(stream))))
        log.append(("kernel", None, stream_pointer(stream)))

    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    monkeypatch.setattr(nvimgcodec, "_current_stream",
                        lambda target: FakeStream(log, KERNEL_STREAM))
    monkeypatch.setattr(chute.kernels, "resize_normalize", resize_normalize)
    spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0",
                     options={"roi_decode": True, "decoders": 1}, size=(16, 16),
                     dtype="float16")
    backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)  # what create() makes on a GPU
    try:
        worker = backend._sync.stream.cuda_stream
        request = image_plan(dataset, (16, 16), batch_size=6).request(0)
        out = {"image": torch.zeros(spec.image_shape(6), dtype=torch.half)}
        for _ in range(2):
            assert backend.fill(request, out).tolist() == [0] * 6
    finally:
        backend.close()
    assert [d["cuda_stream"] for d in codec.decodes] == [worker, worker]
    # the kernel's stream; the images say they were written on the worker's stream
    assert launches == [(KERNEL_STREAM, [worker])] * 2
    decoded, consumed = backend._sync.decoded.name, backend._sync.consumed.name
    assert log == [("record", decoded, worker), ("wait", decoded, KERNEL_STREAM),
                   ("kernel", None, KERNEL_STREAM), ("record", consumed, KERNEL_STREAM),
                   # the next decode into the same images only after the kernel ran
                   ("host-wait", consumed, None),
                   ("record", decoded, worker), ("wait", decoded, KERNEL_STREAM),
                   ("kernel", None, KERNEL_STREAM), ("record", consumed, KERNEL_STREAM)]


def test_a_host_buffer_on_the_gpu_path_is_refused_in_one_line():
    with pytest.raises(TypeError, match="CUDA tensor, not a ndarray; pass the Pipeline's"):
        nvimgcodec._current_stream(np.zeros((1, 3, 4, 4), np.float16))


class ProbeCodec(FakeCodec):
    """The probe's calls: GPU-only decoders that decode a 4:2:0 JPEG whole and by a window
    (`answer` "windows"), whole only ("whole"), neither ("none"), or cannot be made
    ("raise")."""

    GPU_ONLY, HW_GPU_ONLY, HYBRID_CPU_GPU = "gpu", "hw", "hybrid"

    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.backends: list = []

    def CodeStream(self, data):  # noqa: N802
        return types.SimpleNamespace(
            size=(64, 64), get_sub_code_stream=lambda region: types.SimpleNamespace(size=region))

    def Decoder(self, **kwargs):  # noqa: N802
        if "options" in kwargs:  # the backend's own decoders
            return super().Decoder(**kwargs)
        if self.answer == "raise":
            raise RuntimeError("no decoder of these backends")
        self.backends.append(kwargs["backends"])
        answer = self.answer

        class Decoder:
            def decode(self, streams, images=None, params=None, cuda_stream=None):
                whole, window = streams
                return [None if answer == "none" else FakeImage(*whole.size, cuda_stream),
                        FakeImage(*window.size, cuda_stream) if answer == "windows" else None]

        return Decoder()


def _probe_backend(dataset, monkeypatch, answer):
    codec = ProbeCodec(answer)
    fake_cuda(monkeypatch, nvimgcodec)
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    nvimgcodec.gpu_jpeg_decoding.cache_clear()
    try:
        spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0", options={},
                         size=(16, 16), dtype="float16")
        backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)
        backend.close()
        return backend, codec
    finally:
        nvimgcodec.gpu_jpeg_decoding.cache_clear()


@pytest.mark.parametrize("answer, whole", [("windows", "none"), ("whole", "subsampled")])
def test_auto_decodes_subsampled_jpegs_whole_where_the_gpu_refuses_their_windows(
        dataset, monkeypatch, answer, whole):
    # nvJPEG < 13.2 refuses such windows and nvImageCodec then decodes on the CPU, silently
    backend, codec = _probe_backend(dataset, monkeypatch, answer)
    assert backend.whole == whole
    assert ("nvJPEG before 13.2" in backend.roi_reason) is (whole == "subsampled")
    assert codec.backends == [["gpu", "hw", "hybrid"]]  # the probe asked the GPU decoders alone


@pytest.mark.parametrize("answer", ["none", "raise"])
def test_a_gpu_that_decodes_no_jpeg_is_refused_not_left_to_the_cpu(dataset, monkeypatch,
                                                                    answer):
    # the decoder nvImageCodec would make then decodes every image with libjpeg-turbo
    with pytest.raises(BackendUnavailableError, match=r"cuda:0: nvImageCodec's GPU decoders "
                                                      r"decode no JPEG here.*backend='cpu'"):
        _probe_backend(dataset, monkeypatch, answer)


@pytest.mark.parametrize("option, subsampled", [
    (False, [False] * 6),
    ("subsampled", [True, False, True, False, False, True]),
])
def test_whole_image_decodes_move_the_boxes_into_the_image(dataset, monkeypatch, option,
                                                           subsampled):
    # roi_decode=False: every image whole; "subsampled": the subsampled ones
    whole_rows = [True] * 6 if option is False else subsampled
    codec = FakeCodec()
    seen: list = []
    log = fake_cuda(monkeypatch, nvimgcodec)
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    monkeypatch.setattr(nvimgcodec, "_current_stream",
                        lambda target: FakeStream(log, KERNEL_STREAM))
    spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0",
                     options={"roi_decode": option is not False}, size=(16, 16),
                     dtype="float16")
    backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)
    if option == "subsampled":  # what "auto" takes where the GPU refuses 4:2:0 windows
        backend.whole = "subsampled"
        checks = nvimgcodec.header_checks
        monkeypatch.setattr(nvimgcodec, "header_checks", lambda *a: (
            checks(*a)[0], np.array(subsampled)))
    request = image_plan(dataset, (16, 16), batch_size=6).request(0)

    def decode(worker, streams, windows, inner, flips, refused):
        # a whole image is decoded from the CodeStream itself, a window from a sub-stream
        whole = np.array([not hasattr(stream, "size") for _, stream in streams])
        seen.append((windows.copy(), whole))
        images = [np.zeros((*w[2:], 3), np.uint8) for w in windows]
        return nvimgcodec._Decoded(worker, images, inner, flips, refused.astype(np.uint8))

    def resize_normalize(sources, boxes, flips, out, *, stream, **kwargs):
        seen.append(np.asarray(boxes))

    monkeypatch.setattr(backend, "_decode", decode)
    monkeypatch.setattr(chute.kernels, "resize_normalize", resize_normalize)
    backend.fill(request, {"image": torch.zeros(spec.image_shape(6), dtype=torch.half)})
    backend.close()
    (windows, whole), boxes = seen
    ids = np.asarray(request.ids)
    sizes = backend.size_table()[ids]
    crop_windows, _ = nvimgcodec.roi_windows(request.params["boxes"], sizes, (16, 16))
    assert whole.tolist() == whole_rows
    for k in range(6):
        want = [0, 0, *sizes[k]] if whole_rows[k] else crop_windows[k].tolist()
        assert windows[k].tolist() == list(want)
    # every box, moved into its window, is the sample's crop box again
    np.testing.assert_allclose(boxes[:, :2] + windows[:, :2], request.params["boxes"][:, :2],
                               atol=1e-3)


def test_roi_decode_takes_auto_true_or_false(dataset):
    spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cpu", options={"roi_decode": "yes"},
                     size=(16, 16), dtype="float16")
    with pytest.raises(ValueError, match="roi_decode must be 'auto' \\(the default\\), True "
                                         "or False, not 'yes'; leave it out"):
        nvimgcodec.NvImgCodecBackend(spec, device_id=None)


def test_a_batch_dropped_in_flight_is_waited_for_before_its_images_are_reused(dataset,
                                                                             monkeypatch):
    # a pass stopped early (a break, Lightning's sanity check) drops the batch its worker
    # decoded ahead; that decode may still write the worker's images on the worker's stream
    codec = FakeCodec()
    log = fake_cuda(monkeypatch, nvimgcodec)
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    monkeypatch.setattr(nvimgcodec, "_current_stream",
                        lambda target: FakeStream(log, KERNEL_STREAM))
    monkeypatch.setattr(chute.kernels, "resize_normalize", lambda *a, **k: None)
    spec = ImageSpec("nvimgcodec", "image", dataset, 2, "cuda:0",
                     options={"roi_decode": True, "decoders": 1}, size=(16, 16),
                     dtype="float16")
    backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)
    try:
        plan = image_plan(dataset, (16, 16), batch_size=2)  # 3 batches
        epoch = backend.open_epoch(plan, 0)
        epoch.read(plan.request(0), {"image": torch.zeros(spec.image_shape(2),
                                                          dtype=torch.half)})
        epoch.close()  # batch 1, decoded ahead, is dropped
        worker = backend.workers.states[0]
        own, consumed = worker.stream.cuda_stream, worker.consumed.name
        assert log[-1] == ("record", consumed, own)  # after the dropped decode, on its stream
        mark = len(log)
        backend.open_epoch(plan, 0).close()  # the next pass decodes into the same images
        assert log[mark] == ("host-wait", consumed, None)
    finally:
        backend.close()
