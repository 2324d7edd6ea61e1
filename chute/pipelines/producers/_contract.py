"""The producer contract: what fills one field's outputs for a BatchRequest
(docs/design.md, "Plans and producers").

The Pipeline owns order, partition, resume, prefetch, staging and substitution; a producer only
fills its outputs. Producers are modules listed in `pipelines/producers/_registry.py` that export
`create(spec) -> Producer` and `candidates(device) -> list` (autotune candidates; empty when
there is nothing to choose).

    producer = module.create(spec)                # spec: ProducerSpec (or ImageSpec)
    producer.outputs() -> {key: Output}           # what it writes, at most how large
    producer.param_sources() -> (ParamSource,..)  # what the plan computes per sample for it
    producer.shapes(request) -> {key: shape}      # this batch's shapes (leading B)
    epoch = producer.open_epoch(plan, first_iteration)
    status = epoch.read(request, out)             # in plan order, from ONE thread
    status = producer.fill(request, out)          # random access (substitutes), any request
    epoch.close(); producer.close()               # both idempotent

Rules:
- `out` maps each output key to this batch's array (already shaped by `shapes`): a host NumPy
  array (pinned under CUDA) or, for keys with `Output.on_device`, a torch tensor on the
  Pipeline's device (a CPU tensor on a CPU Pipeline); a list of B items for keys whose
  `Output.dtype` is None. `read` and `fill` (substitutes) get the same kinds. The producer
  writes every row.
- `read` returns uint8 [B]: 0 = ok, non-zero = that sample failed (its rows are replaced by the
  Pipeline). Requests come strictly in order from `first_iteration`; any other iteration raises.
- A device producer's writes must be complete or enqueued on the caller's current CUDA stream
  when `read` returns. It must not keep `out` after returning.
- Errors that are not per-sample (missing library, no device) raise BackendUnavailableError.
- Optional: a producer with an attribute `stages` is given the Pipeline's StageTimes there
  (`chute/pipelines/_common/_stages.py`) and records its parts as "FIELD/PART"; a producer that
  keeps batches in flight uses `_inflight.InFlightEpoch` as its epoch reader (docs/pipeline.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute._output_types import Layout, image_batch_shape, numpy_dtype
from chute.errors import ChuteError

__all__ = [
    "Output",
    "ProducerSpec",
    "ImageSpec",
    "Producer",
    "EpochReader",
    "SequentialEpoch",
    "StoredFieldProducer",
    "check_in_order",
    "check_options",
    "typed_options",
    "no_candidates",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Output:
    """One output key: per-sample shape (the largest, for variable shapes) and dtype (None: a
    list of Python objects). `on_device`: the producer writes the device tensor itself.
    `cast`: the torch dtype the Pipeline casts the batch to on the device (None: as written).
    `exact`: a row must have the batch's shape; a smaller substitute is never zero-padded into
    it (e.g. video frames at their stored size), the batch is read again at its shape.
    `batch_elements`: the most elements one batch holds, where that is less than the largest
    batch size times `sample_shape` (buckets pair large batches with small clips and small
    batches with large ones): slots hold this many (None: batch size x `sample_shape`)."""

    sample_shape: tuple[int, ...]
    dtype: np.dtype | None
    on_device: bool = False
    cast: Any = None
    exact: bool = False
    batch_elements: int | None = None


@dataclass(frozen=True)
class ProducerSpec:
    """What a producer is built from.

    Attributes:
        name: the registered producer name ("cpu", "dali", "ndarray", ...).
        field: the dataset field it reads; its output key is the field name.
        dataset: the open `chute.readers.Dataset`.
        batch_size: the largest batch it is asked for.
        device: "cpu" or "cuda:N".
        prefetch: batches the Pipeline keeps in flight (a producer with its own queue may use it).
        options: the field's options: the family's options dataclass (`AudioOptions`,
            `ArrayOptions`, `Lookup`), or a dict of this producer's options (unknown ones
            raise), which the producers that take a dataclass convert with `typed_options`.
        augment: "train" (random choices keyed by seed, epoch, sample) or "eval".
        unit: the Pipeline's sample unit (e.g. `producers/audio/_units.py`) when its samples
            are not dataset rows (audio segments), else None.
    """

    name: str
    field: str
    dataset: Any
    batch_size: int
    device: str = "cpu"
    prefetch: int = 2
    # dataclasses.field: the attribute `field` above shadows the name in this class body
    options: Any = dataclasses.field(default_factory=dict)
    augment: str = "train"
    unit: Any = None


@dataclass(frozen=True)
class ImageSpec(ProducerSpec):
    """A ProducerSpec for image decoders: output size (H, W), dtype ("uint8", "float16",
    "float32"), layout ("NCHW" | "NHWC"), mean/std as fractions of 255, the crop config and the
    dataset columns with the full image sizes. `views`: the crop config of every view (after
    `count` expansion) when the field delivers multi-crop views (`ImageOptions.views`), whose
    output keys are `view_key(field, v)`; empty for one image per sample."""

    size: tuple[int, int] = (224, 224)
    dtype: str = "float16"
    layout: Layout = "NCHW"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    crop: Any = None
    size_fields: tuple[str, str] = ("height", "width")
    views: tuple = ()

    @property
    def numpy_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    def image_shape(self, batch: int) -> tuple[int, int, int, int]:
        return image_batch_shape(batch, *self.size, self.layout)


class EpochReader(Protocol):
    def read(self, request: Any, out: dict[str, Any]) -> np.ndarray: ...

    def close(self) -> None: ...


class Producer(Protocol):
    name: str
    field: str

    def outputs(self) -> dict[str, Output]: ...

    def param_sources(self) -> tuple: ...

    def shapes(self, request: Any) -> dict[str, tuple[int, ...]]: ...

    def open_epoch(self, plan: Any, first_iteration: int) -> EpochReader: ...

    def fill(self, request: Any, out: dict[str, Any]) -> np.ndarray: ...

    def close(self) -> None: ...


class StoredFieldProducer:
    """Base of producers that deliver a stored field as it is: no per-sample parameters, no
    look-ahead (reads are `fill` in plan order), nothing to release, nothing to tune."""

    name: str
    field: str

    def outputs(self) -> dict[str, Output]:
        raise NotImplementedError

    def param_sources(self) -> tuple:
        return ()

    def shapes(self, request: Any) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def open_epoch(self, plan, first_iteration: int) -> EpochReader:
        return SequentialEpoch(self, first_iteration)

    def fill(self, request: Any, out: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass


def check_in_order(epoch, request) -> None:
    """Raise unless `request` is the next iteration an open epoch reader (`producer`,
    `next_iteration`, `closed`) may read: the contract's in-order rule (docs/design.md)."""
    if epoch.closed:
        raise ChuteError(f"producer {epoch.producer.name!r}: read after close")
    if request.iteration != epoch.next_iteration:
        raise ChuteError(
            f"producer {epoch.producer.name!r} asked for iteration {request.iteration}, "
            f"expected {epoch.next_iteration}: iterations must be read in order without gaps")


class SequentialEpoch:
    """The epoch reader of a stateless producer: `fill` in plan order, enforced."""

    def __init__(self, producer: Producer, first_iteration: int):
        self.producer = producer
        self.next_iteration = first_iteration
        self.closed = False

    def read(self, request, out: dict[str, Any]) -> np.ndarray:
        check_in_order(self, request)
        self.next_iteration += 1
        return self.producer.fill(request, out)

    def close(self) -> None:
        self.closed = True


def check_options(name: str, options: dict, known: set[str] | frozenset[str]) -> None:
    """Raise for options a producer does not know, naming the ones it accepts."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown options {unknown} for producer {name!r}; it accepts "
                         f"{sorted(known) or 'none'}")


def typed_options(spec: ProducerSpec, cls: type[T]) -> T:
    """`spec.options` as the options dataclass `cls`, whose defaults are the only ones: the
    instance a family passed, or a dict (a ProducerSpec built by hand) converted once.

    Args:
        spec: the producer's spec.
        cls: the options dataclass the producer reads.
    """
    if isinstance(spec.options, cls):
        return spec.options
    if not isinstance(spec.options, Mapping):
        raise TypeError(f"producer {spec.name!r} of field {spec.field!r} takes {cls.__name__} "
                        f"or a dict of its options, got {type(spec.options).__name__}")
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    check_options(spec.name, dict(spec.options), {f.name for f in fields})
    missing = [f.name for f in fields if f.name not in spec.options
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"producer {spec.name!r} of field {spec.field!r} needs options "
                         f"{missing}; give them as {cls.__name__}(...) does")
    return cls(**spec.options)


def no_candidates(device: str) -> list:
    """`candidates(device)` of producers with nothing for the autotuner to choose."""
    return []
