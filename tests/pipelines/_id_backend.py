"""A test image producer that "decodes" sample i into an image filled with the value i.

It lets the Pipeline tests check order, resume and slot lifetime without paying for JPEG
decoding, and check that every image row matches its `index`. Registered as "test-ids".
"""

from __future__ import annotations

import time

import numpy as np

from chute.pipelines.producers._contract import SequentialEpoch, check_options
from chute.pipelines.producers.image._producer import ImageProducerBase

CALLS: list[tuple[int, int]] = []  # (iteration, first id) of every read, for the O(1) test


class IdBackend(ImageProducerBase):
    name = "test-ids"

    def __init__(self, spec):
        check_options(self.name, spec.options, {"delay"})
        super().__init__(spec)
        self.delay = float(spec.options.get("delay", 0.0))

    def open_epoch(self, plan, first_iteration):
        return SequentialEpoch(self, first_iteration)

    def fill(self, request, out):
        return self.read(request.iteration, request.ids, out[self.field])

    def read(self, iteration, ids, out):
        CALLS.append((iteration, int(ids[0])))
        if self.delay:
            time.sleep(self.delay)
        out[...] = ids.reshape((-1,) + (1,) * (out.ndim - 1)).astype(out.dtype)
        return np.zeros(len(ids), np.uint8)

    def close(self):
        pass


def create(spec):
    return IdBackend(spec)


def candidates(device):
    return []
