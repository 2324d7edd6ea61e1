"""A test image producer that writes its output on the device itself (`Output.on_device`), as
the GPU decoders do, and records what kind of buffer each `read` and `fill` is handed. Sample
i becomes an image filled with i; ids in the backend option "fail" fail (status 1), so the
Pipeline substitutes them. Registered as "test-on-device"."""

from __future__ import annotations

import numpy as np

from chute.pipelines.producers._contract import SequentialEpoch, check_options
from chute.pipelines.producers.image._producer import ImageProducerBase

HANDED: list[tuple[str, str]] = []  # (type name, device) of every buffer the producer got


class DeviceBackend(ImageProducerBase):
    name = "test-on-device"
    output_on_device = True

    def __init__(self, spec):
        check_options(self.name, spec.options, {"fail"})
        super().__init__(spec)
        self.fail = frozenset(int(i) for i in spec.options.get("fail", ()))

    def open_epoch(self, plan, first_iteration):
        return SequentialEpoch(self, first_iteration)

    def fill(self, request, out):
        target = out[self.field]
        HANDED.append((type(target).__name__, str(getattr(target, "device", "host"))))
        for k, i in enumerate(request.ids.tolist()):
            target[k] = i  # a torch tensor on its device, or a host array
        return np.array([int(i) in self.fail for i in request.ids], np.uint8)

    def close(self):
        pass


def create(spec):
    return DeviceBackend(spec)


def candidates(device):
    return []
