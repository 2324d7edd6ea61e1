"""The batching contract: how an epoch's samples are cut into batches, with the resume state
that cut needs (docs/design.md, "Batching").

A Pipeline holds one batching. `FixedBatches` (the default: `batch_size` samples),
`MaxDuration` (at most so many seconds of audio) and `Buckets` (video batches of one shape
each) implement it; the sample unit (dataset rows, segments, merged segments) is orthogonal:
the Pipeline gives every batching the same `PlanContext`.

    bound = batching.bind(fields)                  fields: {name: (family, options)}
    bound.slot_size(batch_size) -> int             the most samples in one batch
    bound.field_options() -> {field: {..}}         producer options it adds (bucket shapes)
    bound.plan(context) -> Plan                    this rank's batches of one epoch
    bound.load_state(state, position, n, where)    its part of a resume state, checked

A Plan (`BatchPlan`, `DurationPlan`, `BucketPlan`) is a frozen value: `len(plan)`,
`plan.request(k)`, `plan.request_for(ids, like)`, `plan.position_after(k)` (samples delivered
by all ranks after k batches of this rank) and `plan.state_after(k)` (the batching's own state
then, e.g. {"bucket_offsets": [...]}), so `Pipeline.state_dict()` is
{seed, epoch, position, fingerprint, **plan.state_after(k)}.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from chute.pipelines._common._request import BatchRequest

__all__ = ["Batching", "BoundBatching", "Plan", "PlanContext", "FixedBatches", "MaxDuration",
           "as_batching"]


class Plan(Protocol):
    @property
    def batch_size(self) -> int: ...

    def __len__(self) -> int: ...

    def request(self, iteration: int) -> BatchRequest: ...

    def request_for(self, ids: np.ndarray, like: BatchRequest | None = None) -> BatchRequest:
        ...

    def position_after(self, batches_done: int) -> int: ...

    def state_after(self, batches_done: int) -> dict: ...


@dataclass(frozen=True)
class PlanContext:
    """What every batching plans from.

    Attributes:
        dataset: the open dataset (its columns; plans keep only its `DatasetRef`).
        n: samples of this epoch.
        seed, epoch, rank, world_size: the epoch and this process's place in the job.
        batch_size: the Pipeline's slot size (`Batching.slot_size`).
        drop_last: drop the incomplete tail.
        shuffle: False delivers the dataset's own order (Pipeline order="sequential").
        augment: "train" or "eval".
        start_position: samples of the epoch delivered by all ranks before this plan starts.
        state: the batching's own resume state at `start_position` ({} at an epoch's start).
        params: parameter sources evaluated for every batch (crops, units, ...).
        durations: seconds every sample of this epoch delivers (for `MaxDuration`).
        sampler: the source's own epoch order (a `chute.mix`'s `MixSampler`), or None for the
            keyed permutation of [0, n).
    """

    dataset: Any
    n: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool
    shuffle: bool
    augment: str
    start_position: int
    state: dict = field(default_factory=dict)
    params: tuple = ()
    durations: Callable[[], np.ndarray] | None = None
    sampler: Any = None


class Batching(Protocol):
    """What `Pipeline(batching=...)` takes: bound to the requested fields, it plans."""

    def bind(self, fields: dict[str, tuple[str, Any]]) -> BoundBatching: ...


class BoundBatching(Protocol):
    """A batching bound to a Pipeline's fields (see the module docstring)."""

    def slot_size(self, batch_size: int | None) -> int: ...

    def field_options(self) -> dict[str, dict]: ...

    def plan(self, context: PlanContext) -> Plan: ...

    def load_state(self, state: dict, position: int, n: int, where: str) -> dict: ...


def _ref(dataset):
    """How processes that reopen the dataset name it: its `ref()` (a `DatasetRef` unless the
    dataset says otherwise, as a mix does)."""
    return dataset.ref()


def _positive_batch(batch_size, what: str) -> int:
    if batch_size is None or isinstance(batch_size, bool) or int(batch_size) < 1:
        raise ValueError(f"{what} needs batch_size >= 1, got {batch_size!r}")
    return int(batch_size)


def _no_state(state: dict, where: str, name: str) -> dict:
    if state.get("bucket_offsets"):
        raise ValueError(f"{where}: the state was saved by a Pipeline with batching=Buckets(...); "
                         f"load it into one with the same buckets (this one uses {name})")
    return {}


def _plan_args(c: PlanContext, *, drop_last: bool) -> dict:
    """What every BatchPlan (and its subclasses) is made of."""
    return dict(dataset=_ref(c.dataset), n=c.n, seed=c.seed, epoch=c.epoch, rank=c.rank,
                world_size=c.world_size, batch_size=c.batch_size, drop_last=drop_last,
                start_position=c.start_position, params=c.params, shuffle=c.shuffle,
                sampler=c.sampler)


class _FieldFree:
    """A batching that needs nothing from the fields."""

    def bind(self, fields: dict[str, tuple[str, Any]]) -> BoundBatching:
        return self  # type: ignore[return-value]

    def field_options(self) -> dict[str, dict]:
        return {}


@dataclass(frozen=True)
class FixedBatches(_FieldFree):
    """`batch_size` samples per batch and rank (the default batching)."""

    def slot_size(self, batch_size: int | None) -> int:
        return _positive_batch(batch_size, "Pipeline")

    def plan(self, context: PlanContext) -> Plan:
        from chute.pipelines.sampling._plan import BatchPlan

        return BatchPlan(**_plan_args(context, drop_last=context.drop_last))

    def load_state(self, state: dict, position: int, n: int, where: str) -> dict:
        return _no_state(state, where, "fixed batches")


@dataclass(frozen=True)
class MaxDuration(_FieldFree):
    """Batches of at most `seconds` of audio and at most `max_samples` samples: samples of
    similar durations together. With drop_last (train's default) every rank gets the same
    number of batches and the incomplete last round is dropped; without it (eval's default)
    every sample is delivered exactly once across the ranks. The Pipeline's `batch_size` is
    None: the cap lives here (round 3 passed it as `batch_size`, which still works for this
    release with a DeprecationWarning).

    Args:
        seconds: most seconds of audio in one batch, as delivered (after speed perturbation
            and resampling).
        max_samples: most samples in one batch (what the output slots hold).
        window: samples sorted by duration and packed together (larger: less padding, less
            randomness).
    """

    seconds: float
    window: int = 2048
    # keyword-only: round 3's MaxDuration(60, 512) meant window=512
    max_samples: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not float(self.seconds) > 0:
            raise ValueError(f"MaxDuration needs seconds > 0, got {self.seconds!r}")
        if self.max_samples is not None:
            _positive_batch(self.max_samples, "MaxDuration(max_samples=...)")
        if int(self.window) < 1:
            raise ValueError(f"MaxDuration needs window >= 1, got {self.window!r}")

    def slot_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            if self.max_samples is None:
                raise ValueError(f"MaxDuration needs the most samples in one batch: write "
                                 f"batching=MaxDuration({self.seconds!r}, max_samples=N)")
            return int(self.max_samples)
        if self.max_samples is not None:
            raise ValueError(f"Pipeline: batch_size={batch_size!r} and MaxDuration(max_samples="
                             f"{self.max_samples!r}) both cap a batch; pass batch_size=None")
        size = _positive_batch(batch_size, "MaxDuration (batch_size: the most samples in one "
                                           "batch)")
        warnings.warn(f"Pipeline(batch_size={size}, batching=MaxDuration({self.seconds!r})) is "
                      "the round-3 spelling and goes away in the next release; write "
                      f"Pipeline(..., None, batching=MaxDuration({self.seconds!r}, "
                      f"max_samples={size})) (docs/coming-from.md)", DeprecationWarning,
                      stacklevel=4)
        return size

    def plan(self, context: PlanContext) -> Plan:
        from chute.pipelines.sampling._duration_plan import DurationPlan

        c = context
        if c.durations is None:
            raise ValueError("MaxDuration needs the samples' durations")
        return DurationPlan(**_plan_args(c, drop_last=c.drop_last),
                            max_duration=float(self.seconds),
                            durations=c.durations(), window=int(self.window))

    def load_state(self, state: dict, position: int, n: int, where: str) -> dict:
        return _no_state(state, where, "MaxDuration")


def as_batching(batching) -> Batching:
    """`batching` checked: None is `FixedBatches()`."""
    if batching is None:
        return FixedBatches()
    if not hasattr(batching, "bind"):
        raise TypeError(f"batching must be chute.MaxDuration(...), chute.Buckets(...) or None "
                        f"(batches of batch_size), got {batching!r:.100}")
    return batching
