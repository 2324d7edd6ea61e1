"""Producers `json` and `bytes`: per-sample values delivered as a list of B items (decoded JSON
metadata; raw payloads as read-only zero-copy uint8 arrays)."""

from __future__ import annotations

import numpy as np

from chute.errors import FormatError
from chute.pipelines._producer import Output, ProducerSpec, SequentialEpoch, check_options

__all__ = ["ListProducer", "create", "candidates"]


class ListProducer:
    def __init__(self, spec: ProducerSpec):
        check_options(spec.name, spec.options, set())
        self.name = spec.name
        self.field = spec.field
        self.reader = spec.dataset.reader(spec.field)

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((), None)}

    def param_sources(self) -> tuple:
        return ()

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: (len(request.ids),)}

    def open_epoch(self, plan, first_iteration: int) -> SequentialEpoch:
        return SequentialEpoch(self, first_iteration)

    def fill(self, request, out: dict) -> np.ndarray:
        status = np.zeros(len(request.ids), np.uint8)
        values = out[self.field]
        try:
            values[:] = self.reader.read(request.ids)
            return status
        except FormatError:
            pass  # find the corrupt records one by one
        for row, i in enumerate(request.ids.tolist()):
            try:
                values[row] = self.reader.read(np.array([i], np.int64))[0]
            except FormatError:  # a corrupt record: the sample is substituted, never wrong
                values[row] = None
                status[row] = 1
        return status

    def close(self) -> None:
        pass


def create(spec: ProducerSpec) -> ListProducer:
    return ListProducer(spec)


def candidates(device: str) -> list:
    return []
