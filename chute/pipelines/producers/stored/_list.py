"""Producers `json` and `bytes`: per-sample values delivered as a list of B items (decoded JSON
metadata; raw payloads as read-only zero-copy uint8 arrays)."""

from __future__ import annotations

import numpy as np

from chute.errors import FormatError
from chute.pipelines.producers._contract import (
    Output,
    ProducerSpec,
    StoredFieldProducer,
    check_options,
    no_candidates,
)

__all__ = ["ListProducer", "create", "candidates"]


class ListProducer(StoredFieldProducer):
    def __init__(self, spec: ProducerSpec):
        check_options(spec.name, spec.options, set())
        self.name = spec.name
        self.field = spec.field
        self.reader = spec.dataset.reader(spec.field)

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((), None)}

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: (len(request.ids),)}

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


def create(spec: ProducerSpec) -> ListProducer:
    return ListProducer(spec)


candidates = no_candidates
