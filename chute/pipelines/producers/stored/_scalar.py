"""Producer `scalar`: a scalar column gathered into a `[B]` array (labels, sizes)."""

from __future__ import annotations

import numpy as np

from chute.pipelines.producers._contract import (
    Output,
    ProducerSpec,
    StoredFieldProducer,
    check_options,
    no_candidates,
)

__all__ = ["ScalarProducer", "create", "candidates"]


class ScalarProducer(StoredFieldProducer):
    name = "scalar"

    def __init__(self, spec: ProducerSpec):
        check_options(self.name, spec.options, set())
        self.field = spec.field
        self._column = np.asarray(spec.dataset.column(spec.field))

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((), self._column.dtype)}

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: (len(request.ids),)}

    def fill(self, request, out: dict) -> np.ndarray:
        np.take(self._column, request.ids, out=out[self.field])
        return np.zeros(len(request.ids), np.uint8)


def create(spec: ProducerSpec) -> ScalarProducer:
    return ScalarProducer(spec)


candidates = no_candidates
