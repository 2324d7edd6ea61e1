"""Producer `scalar`: a scalar column gathered into a `[B]` array (labels, sizes)."""

from __future__ import annotations

import numpy as np

from chute.pipelines._producer import Output, ProducerSpec, SequentialEpoch, check_options

__all__ = ["ScalarProducer", "create", "candidates"]


class ScalarProducer:
    name = "scalar"

    def __init__(self, spec: ProducerSpec):
        check_options(self.name, spec.options, set())
        self.field = spec.field
        self._column = np.asarray(spec.dataset.column(spec.field))

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((), self._column.dtype)}

    def param_sources(self) -> tuple:
        return ()

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: (len(request.ids),)}

    def open_epoch(self, plan, first_iteration: int) -> SequentialEpoch:
        return SequentialEpoch(self, first_iteration)

    def fill(self, request, out: dict) -> np.ndarray:
        np.take(self._column, request.ids, out=out[self.field])
        return np.zeros(len(request.ids), np.uint8)

    def close(self) -> None:
        pass


def create(spec: ProducerSpec) -> ScalarProducer:
    return ScalarProducer(spec)


def candidates(device: str) -> list:
    return []
