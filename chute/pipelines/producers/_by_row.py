"""A producer seen through a sample unit whose samples are not dataset rows (audio segments, or
any family's unit): it reads, for each sample, the row the unit's parameter names, while the
request keeps its sample ids, so substitution and `index` stay per sample (docs/design.md,
"Fields, families and batching")."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chute.pipelines.producers._contract import Output

__all__ = ["ByRow"]


class ByRow:
    """`producer` reading the rows of `params[key]` instead of the sample ids.

    Args:
        producer: the producer of a field stored per row (a label, a transcript, ...).
        key: the unit's parameter holding each sample's dataset row (e.g. "recording").
    """

    def __init__(self, producer, key: str):
        self.inner, self.key = producer, key
        self.name = producer.name
        self.field = producer.field
        self.seconds = getattr(producer, "seconds", None)  # what duration batching packs

    def rows(self, request):
        """`request` with the samples' rows as its ids."""
        return replace(request, ids=np.asarray(request.params[self.key], np.int64))

    def outputs(self) -> dict[str, Output]:
        return self.inner.outputs()

    def param_sources(self) -> tuple:
        return self.inner.param_sources()

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return self.inner.shapes(self.rows(request))

    def open_epoch(self, plan, first_iteration: int):
        # a producer that plans ahead (batches in flight) must see the rows it will be asked for
        return _RowsEpoch(self.inner.open_epoch(_RowsPlan(plan, self), first_iteration), self)

    def fill(self, request, out: dict) -> np.ndarray:
        return self.inner.fill(self.rows(request), out)

    def close(self) -> None:
        self.inner.close()


class _RowsPlan:
    """A plan seen through the unit: its requests carry the rows as ids."""

    def __init__(self, plan, by: ByRow):
        self.plan, self.by = plan, by

    def request(self, iteration: int):
        return self.by.rows(self.plan.request(iteration))

    def __len__(self) -> int:
        return len(self.plan)

    def __getattr__(self, name: str):
        return getattr(self.plan, name)


class _RowsEpoch:
    def __init__(self, epoch, by: ByRow):
        self.epoch, self.by = epoch, by

    def read(self, request, out: dict) -> np.ndarray:
        return self.epoch.read(self.by.rows(request), out)

    def close(self) -> None:
        self.epoch.close()
