"""A stand-in for the few CuPy calls `chute/kernels/_launch.py` makes, recording them, so the
launcher's stream handling runs without a GPU. `fake_cupy(version=14)` has
`Stream.from_external` (CuPy 14); `version=13` has not (CuPy 13). Both make `ExternalStream`,
deprecated in CuPy 14, fail the test that reaches it."""

from __future__ import annotations

import contextlib
import itertools
import types

import numpy as np


def fake_cupy(version: int = 14) -> types.ModuleType:
    log: list[tuple] = []
    events = itertools.count(9000)

    class BaseStream:
        def __init__(self, ptr, device_id):
            self.ptr = ptr
            self.device_id = device_id

        def __enter__(self):
            log.append(("enter", self.ptr))
            return self

        def __exit__(self, *exc):
            log.append(("exit", self.ptr))

        def wait_event(self, event):
            log.append(("wait", self.ptr, event.ptr))

    class Stream(BaseStream):
        def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
            raise AssertionError("the launcher must not create a CUDA stream")

        def __del__(self):  # CuPy 14 leaves a stream made by from_external to its owner
            if getattr(self, "_foreign_stream_ref", None) is None:
                log.append(("destroy", self.ptr))

    if version >= 14:
        def from_external(cls, obj):
            _, ptr = obj.__cuda_stream__()
            log.append(("from_external", ptr))
            stream = cls.__new__(cls)
            BaseStream.__init__(stream, ptr, 0)
            stream._foreign_stream_ref = obj
            return stream

        Stream.from_external = classmethod(from_external)  # type: ignore[attr-defined]

    class Event:
        def __init__(self, disable_timing=False):
            self.ptr = next(events)

    def external_stream(*args, **kwargs):
        raise AssertionError("cupy.cuda.ExternalStream is deprecated in CuPy 14")

    def event_record(event_ptr, stream_ptr):
        log.append(("record", event_ptr, stream_ptr))

    class Buffer:
        def __init__(self, n):
            self.data = types.SimpleNamespace(ptr=0x10000)
            self.size = n

    def empty(n, dtype=None):
        log.append(("alloc", n))
        return Buffer(n)

    runtime = types.SimpleNamespace(
        pointerGetAttributes=lambda ptr: types.SimpleNamespace(device=0),
        eventRecord=event_record,
    )
    current = BaseStream(0, -1)
    cuda = types.SimpleNamespace(
        Stream=Stream, Event=Event, ExternalStream=external_stream, runtime=runtime,
        Device=lambda device_id: contextlib.nullcontext(),
        get_current_stream=lambda: current,
    )
    module = types.ModuleType("cupy")
    module.cuda = cuda  # type: ignore[attr-defined]
    module.empty = empty  # type: ignore[attr-defined]
    module.uint8 = np.uint8  # type: ignore[attr-defined]
    module.log = log  # type: ignore[attr-defined]
    return module


class FakeKernelModule:
    """`_launch._module(device)`: every kernel launch is logged with its stream."""

    def __init__(self, log: list):
        self.log = log

    def get_function(self, name):
        def kernel(grid, block, args):
            self.log.append(("kernel", name))
        return kernel


class FakeArgRing:
    """`_launch._arg_ring(device)`: the argument copy is logged with its stream."""

    def __init__(self, log: list):
        self.log = log

    def copy_to_device(self, host, device, stream):
        self.log.append(("args", stream.ptr))
