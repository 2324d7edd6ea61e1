"""CUDA streams and events without a GPU, for the nvimgcodec backend's GPU path: what the
backend asks of them (record, wait, host wait) is logged in order, so tests can check that a
kernel's stream waits for the decode it reads and that a worker reuses its images only after
a host wait on the kernel that read them (docs/pipeline.md, "Batches in flight")."""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["FakeStream", "FakeEvent", "fake_cuda"]

_ids = itertools.count(1)


class FakeEvent:
    def __init__(self, log: list, name: str):
        self.log, self.name, self.stream = log, name, None

    def record(self, stream) -> None:
        self.stream = stream
        self.log.append(("record", self.name, stream.cuda_stream))

    def synchronize(self) -> None:
        self.log.append(("host-wait", self.name, None))


class FakeStream:
    def __init__(self, log: list, ptr: int):
        self.log, self.cuda_stream = log, ptr

    def wait_event(self, event) -> None:
        self.log.append(("wait", event.name, self.cuda_stream))


def fake_cuda(monkeypatch, module) -> list:
    """Patch the backend module's CUDA resources (a stream and two events per decode worker,
    pinned buffers as plain arrays); returns the log."""
    log: list = []

    def resources(device_id):
        k = next(_ids)
        return (FakeStream(log, 0x1000 + k), FakeEvent(log, f"decoded{k}"),
                FakeEvent(log, f"consumed{k}"))

    monkeypatch.setattr(module, "_cuda_resources", resources)
    monkeypatch.setattr(module, "_pinned", lambda n: np.empty(n, np.uint8))
    return log
