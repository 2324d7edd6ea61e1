"""A producer family: what a Pipeline needs to know about one kind of field (docs/design.md,
"Plans and producers").

A family is a module listed in `_registry.FAMILIES` exporting `FAMILY`, a `Family`: its typed
options class (`ImageOptions`, `VideoOptions`, ...), a `build` that turns a field's options into
the `ProducerSpec` of the producer that fills it (deciding `backend="auto"` through the family's
own auto hook), and, for families whose options change what one sample is (audio segments), a
`unit` hook. The Pipeline only calls these; adding a kind of field is one family module and one
registry entry, with no change to the Pipeline, its run loop or sampling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chute.pipelines.producers._contract import ProducerSpec

__all__ = ["Family", "FieldContext", "FieldBuild", "options_from_dict"]


@dataclass(frozen=True)
class FieldContext:
    """What a family's `build` may use besides the field's options.

    Attributes:
        dataset: the open dataset.
        batch_size: the largest batch the producer is asked for.
        device: "cpu" or "cuda:N".
        prefetch: batches the Pipeline keeps in flight.
        augment: "train" or "eval".
        unit: the Pipeline's sample unit (`producers/audio/_units.py`), or None for dataset rows.
        batching: producer options the batching adds for this field (e.g. the bucket table of
            a video field under `Buckets`).
    """

    dataset: Any
    batch_size: int
    device: str
    prefetch: int
    augment: str
    unit: Any = None
    batching: dict = field(default_factory=dict)

    def spec(self, name: str, field_name: str, options: Any, **extra) -> ProducerSpec:
        """A ProducerSpec for producer `name` filling `field_name`."""
        spec_type = extra.pop("spec_type", ProducerSpec)
        return spec_type(name=name, field=field_name, dataset=self.dataset,
                         batch_size=self.batch_size, device=self.device, prefetch=self.prefetch,
                         options=options, augment=self.augment, unit=self.unit, **extra)


@dataclass(frozen=True)
class FieldBuild:
    """A field's producer spec and what the Pipeline does with its output.

    Attributes:
        spec: the producer to create.
        finish: applied to the field's output tensor on the device after the producer wrote it
            (a cast, a memory format), or None.
        decision: {"backend", "options", "reason"}: the backend chosen and why, for families
            with a choice of backend (images always; video when its options say "auto").
        parts: output keys the Pipeline delivers as one list under the field's name, in this
            order (an image field's views), before `finish` (which then gets the list); empty:
            the field's outputs are delivered as they are.
    """

    spec: ProducerSpec
    finish: Callable[[Any], Any] | None = None
    decision: dict | None = None
    parts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """One kind of field.

    Attributes:
        name: the family's name ("image", "video", "audio", "ndarray", ...).
        options: its options class, or None when its fields take no options.
        build: `build(field, options, context) -> FieldBuild`; `options` is an instance of
            `options` (the defaults when the user gave None).
        by_default: delivered when a Pipeline is given no `fields=`.
        unit: `unit(field, options, dataset) -> unit | None`, for families whose options say
            what one sample is; None when they never do. A unit is a ParamSource
            (`unit(seed, epoch, ids) -> {name: array}`) with `count(seed, epoch)` (samples of
            an epoch), `rows(ids, seed, epoch)` (each sample's dataset row),
            `describe(id, seed, epoch)` (where a sample is, for messages), `view(producer)`
            (a producer as the unit's samples address it, e.g. `_by_row.ByRow`) and
            `durations(dataset, seed, epoch)` (seconds per sample for MaxDuration, or None
            for the rows' stored durations); `producers/audio/_units.py` is one.
        needs_options: a field of this family cannot be delivered with default options (e.g. a
            table needs `Lookup(index)`); the message says what to pass.
        missing_ok: it delivers None for a sample that lacks the field (a mix's optional
            fields, docs/mixing.md); decoding families cannot.
        reports_backend: the backend chosen for its first field is the Pipeline's
            `stats.backend` (and the round-2 `pipe.backend`): images.
        decoder_status: its producers' failure statuses are `chute.fallbacks.DecodeStatus`
            codes, which failure messages name (images).
        producers: producer name -> module (exporting `create(spec)` and
            `candidates(device)`) of producers the family brings itself, found once the family
            is loaded; the built-in families list theirs in `_registry.PRODUCERS`.
    """

    name: str
    options: type | None
    build: Callable[[str, Any, FieldContext], FieldBuild]
    by_default: bool = True
    unit: Callable[[str, Any, Any], Any] | None = None
    needs_options: str | None = None
    missing_ok: bool = False
    reports_backend: bool = False
    decoder_status: bool = False
    producers: dict[str, str] = field(default_factory=dict)

    def default_options(self, field_name: str) -> Any:
        if self.needs_options is not None:
            raise ValueError(f"field {field_name!r} ({self.name}) {self.needs_options}")
        return None if self.options is None else self.options()


def options_from_dict(cls: type, values: dict, where: str) -> Any:
    """`cls(**values)`, with unknown keys named in a ValueError (what the round-2 dict options
    translate through).

    Args:
        cls: an options dataclass.
        values: its keyword arguments.
        where: how the error names the field.
    """
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown options {unknown}; {cls.__name__} accepts "
                         f"{sorted(known)}")
    return cls(**values)
