"""The `nvimgcodec` backend's GPU path without a GPU: a fake nvImageCodec records what the
backend asks of it. nvImageCodec allocates, orders and frees its decoded images on the stream
given to `decode(..., cuda_stream=)`, so the backend must decode on the stream its kernel runs
on (the caller's current stream), and the images it hands the kernel say so in their
`__cuda_array_interface__`."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import chute.kernels
import chute.pipelines.producers.image._nvimgcodec as nvimgcodec
from chute.kernels import stream_pointer
from chute.kernels._plan import pending_streams, source_views
from chute.pipelines import ImageSpec
from chute.readers import open_dataset
from tests.pipelines._dali_data import write_jpeg_dataset
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
    ColorSpec = types.SimpleNamespace(SRGB="srgb")

    def __init__(self):
        self.decodes: list[dict] = []

    def Backend(self, kind):  # noqa: N802 (nvImageCodec's spelling)
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
            def decode(self, streams, params=None, cuda_stream=None):
                codec.decodes.append({"params": params, "cuda_stream": cuda_stream})
                return [FakeImage(*s.size, cuda_stream) for s in streams]

        return Decoder()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("nvimg") / "ds.chute", n=6))


def test_the_gpu_path_decodes_on_the_stream_its_kernel_runs_on(dataset, monkeypatch):
    codec = FakeCodec()
    launches = []

    def resize_normalize(sources, boxes, flips, out, *, stream, **kwargs):
        views = source_views(sources)
        launches.append((stream_pointer(stream), pending_streams(views, stream_pointer(stream))))

    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    monkeypatch.setattr(nvimgcodec, "_current_stream",
                        lambda target: types.SimpleNamespace(cuda_stream=KERNEL_STREAM))
    monkeypatch.setattr(chute.kernels, "resize_normalize", resize_normalize)
    spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0", options={"roi_decode": True},
                     size=(16, 16), dtype="float16")
    backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)  # what create() makes on a GPU
    request = image_plan(dataset, (16, 16), batch_size=6).request(0)
    status = backend.fill(request, {"image": torch.zeros(spec.image_shape(6), dtype=torch.half)})

    assert status.tolist() == [0] * 6
    assert [d["cuda_stream"] for d in codec.decodes] == [KERNEL_STREAM]
    assert launches == [(KERNEL_STREAM, [])]  # the kernel's stream; nothing left to wait for


def test_a_host_buffer_on_the_gpu_path_is_refused_in_one_line():
    with pytest.raises(TypeError, match="CUDA tensor, not a ndarray; pass the Pipeline's"):
        nvimgcodec._current_stream(np.zeros((1, 3, 4, 4), np.float16))


class ProbeCodec(FakeCodec):
    """The probe's calls: GPU-only decoders that decode a 4:2:0 window (`answer` "image"),
    refuse it ("none") or cannot be made ("raise")."""

    GPU_ONLY, HW_GPU_ONLY, HYBRID_CPU_GPU = "gpu", "hw", "hybrid"

    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.backends: list = []

    def Decoder(self, **kwargs):  # noqa: N802
        if "backends" not in kwargs:  # the backend's own decoder
            return super().Decoder(**kwargs)
        if self.answer == "raise":
            raise RuntimeError("no decoder of these backends")
        self.backends.append(kwargs["backends"])
        codec = self

        class Decoder:
            def decode(self, streams, params=None, cuda_stream=None):
                return [None if codec.answer == "none" else FakeImage(*s.size, cuda_stream)
                        for s in streams]

        return Decoder()


@pytest.mark.parametrize("answer, roi", [("image", True), ("none", False), ("raise", False)])
def test_auto_decodes_windows_only_where_the_gpu_decoders_alone_roi_decode_4_2_0(
        dataset, monkeypatch, answer, roi):
    # nvJPEG < 13.2 refuses such ROI decodes and nvImageCodec then decodes on the CPU, silently
    codec = ProbeCodec(answer)
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    nvimgcodec.gpu_decodes_subsampled_roi.cache_clear()
    try:
        spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0", options={},
                         size=(16, 16), dtype="float16")
        backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)
    finally:
        nvimgcodec.gpu_decodes_subsampled_roi.cache_clear()
    assert backend.roi_decode is roi
    assert ("nvJPEG before 13.2" in backend.roi_reason) is not roi
    if answer != "raise":  # the probe asked the GPU decoders alone
        assert codec.backends[0] == ["gpu", "hw", "hybrid"]


def test_whole_image_decodes_move_the_boxes_into_the_image(dataset, monkeypatch):
    codec = FakeCodec()
    whole: list = []
    codec.CodeStream = lambda data: types.SimpleNamespace(  # type: ignore[method-assign]
        get_sub_code_stream=lambda region: pytest.fail("a window was asked for"))
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    monkeypatch.setattr(nvimgcodec, "_current_stream",
                        lambda target: types.SimpleNamespace(cuda_stream=KERNEL_STREAM))
    spec = ImageSpec("nvimgcodec", "image", dataset, 6, "cuda:0",
                     options={"roi_decode": False}, size=(16, 16), dtype="float16")
    backend = nvimgcodec.NvImgCodecBackend(spec, device_id=0)
    request = image_plan(dataset, (16, 16), batch_size=6).request(0)

    def decode(views, windows, refused, cuda_stream):
        whole.append(windows.copy())
        return [np.zeros((*w[2:], 3), np.uint8) for w in windows]

    def resize_normalize(sources, boxes, flips, out, *, stream, **kwargs):
        whole.append(np.asarray(boxes))

    monkeypatch.setattr(backend, "_decode", decode)
    monkeypatch.setattr(chute.kernels, "resize_normalize", resize_normalize)
    backend.fill(request, {"image": torch.zeros(spec.image_shape(6), dtype=torch.half)})
    windows, boxes = whole
    sizes = backend.size_table()[np.asarray(request.ids)]
    assert windows[:, :2].tolist() == [[0, 0]] * 6 and windows[:, 2:].tolist() == sizes.tolist()
    np.testing.assert_allclose(boxes, np.asarray(request.params["boxes"], np.float32), atol=1e-3)


def test_roi_decode_takes_auto_true_or_false():
    with pytest.raises(ValueError, match="roi_decode must be 'auto', True or False, not 'yes'"):
        nvimgcodec.NvImgCodecBackend._choose_roi_decode(
            types.SimpleNamespace(device_id=0), "yes")
