"""The launcher's streams without a GPU (a fake CuPy records its calls): the kernel runs on the
caller's stream wrapped with `cupy.cuda.Stream.from_external` (CuPy 14; a borrowed Stream on
CuPy 13), never the deprecated `cupy.cuda.ExternalStream`, and it waits for a source written
on another stream, as the source's `__cuda_array_interface__` "stream" key says."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import chute.kernels._launch as launch
from chute.kernels import resize_normalize
from chute.kernels._plan import pending_streams, source_views
from tests.kernels._fake_cupy import FakeArgRing, FakeKernelModule, fake_cupy
from tests.kernels.compare import HostAsDevice

CHUTE = Path(__file__).resolve().parents[2] / "chute"


class OnStream(HostAsDevice):
    """A host array dressed as a CUDA array last written on `stream`."""

    def __init__(self, array, stream):
        super().__init__(array)
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "stream": self.stream}


class TorchLikeStream:
    cuda_stream = 4321


@pytest.fixture(params=[14, 13], ids=["cupy14", "cupy13"])
def cupy(request, monkeypatch):
    module = fake_cupy(request.param)
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setattr(launch, "require_cuda", lambda *args, **kwargs: None)
    monkeypatch.setattr(launch, "_module", lambda device_id: FakeKernelModule(module.log))
    monkeypatch.setattr(launch, "_arg_ring", lambda device_id: FakeArgRing(module.log))
    return module


def launch_with(sources):
    """One launch on the caller's torch-like stream 4321."""
    out = HostAsDevice(np.zeros((len(sources), 3, 4, 4), np.float32))
    resize_normalize(sources, [(0, 0, 2, 2)] * len(sources), [False] * len(sources), out,
                     stream=TorchLikeStream())


def test_source_views_carry_the_array_interfaces_stream():
    image = np.zeros((2, 2, 3), np.uint8)
    views = source_views([OnStream(image, 77), HostAsDevice(image), OnStream(image, None)])
    assert [v.stream for v in views] == [77, None, None]
    dense = source_views(OnStream(np.zeros((2, 2, 2, 3), np.uint8), 1))
    assert [v.stream for v in dense] == [1, 1]
    with pytest.raises(ValueError, match="stream 0 .* forbids"):
        source_views([OnStream(image, 0)])


def test_pending_streams_are_the_other_streams_once_each():
    image = np.zeros((2, 2, 3), np.uint8)
    views = source_views([OnStream(image, s) for s in (5, 4321, None, 5, 1)])
    assert pending_streams(views, 4321) == [5, 1]


def test_the_kernel_runs_on_the_callers_stream_without_the_deprecated_wrapper(cupy):
    launch_with([HostAsDevice(np.zeros((2, 2, 3), np.uint8))])
    log = cupy.log
    assert ("args", 4321) in log and ("enter", 4321) in log
    assert log.index(("enter", 4321)) < log.index(next(e for e in log if e[0] == "kernel"))
    if hasattr(cupy.cuda.Stream, "from_external"):
        assert ("from_external", 4321) in log
    assert not [e for e in log if e[0] in ("destroy", "wait")]  # no waits: nothing pending


def test_the_kernel_waits_for_a_source_written_on_another_stream(cupy):
    image = np.zeros((2, 2, 3), np.uint8)
    launch_with([OnStream(image, 1), OnStream(image, 4321), OnStream(image, 66)])
    log = cupy.log
    records = [e for e in log if e[0] == "record"]
    assert [stream for _, _, stream in records] == [1, 66]
    kernel = log.index(next(e for e in log if e[0] == "kernel"))
    for _, event, _ in records:
        assert log.index(("wait", 4321, event)) < kernel  # the launch stream waits first


def test_a_borrowed_cupy13_stream_is_never_destroyed(monkeypatch):
    module = fake_cupy(13)
    stream = launch.external_stream(module, 1234, 0)
    assert isinstance(stream, module.cuda.Stream) and (stream.ptr, stream.device_id) == (1234, 0)
    del stream
    assert ("destroy", 1234) not in module.log


def test_chute_never_names_cupys_deprecated_external_stream():
    users = [str(p.relative_to(CHUTE)) for p in CHUTE.rglob("*.py")
             if "ExternalStream" in p.read_text(encoding="utf-8")]
    assert users == [], "use cupy.cuda.Stream.from_external (chute.kernels._launch)"
