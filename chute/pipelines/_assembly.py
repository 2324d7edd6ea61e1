"""What a Pipeline's requested fields build: one producer per field (through its family), the
outputs they fill, what is done to each output on the device, and the epoch's size and
durations (docs/design.md, "Plans and producers").

The Pipeline owns the order and the iteration; everything that depends on which fields were
asked for is here, so no field kind is named by the Pipeline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from chute.pipelines._common._options import check_ring_memory
from chute.pipelines._common._stages import StageTimes
from chute.pipelines.producers._contract import Output
from chute.pipelines.producers._family import FieldContext
from chute.pipelines.producers._registry import create_producer

__all__ = ["Assembly", "EpochSizes", "assemble", "sample_unit"]


def sample_unit(requested: dict, dataset) -> Any:
    """The sample unit a field's options ask for (audio segments), else None (dataset rows).

    Args:
        requested: {field: (family, options)} of the Pipeline.
        dataset: the open dataset.
    """
    units = [(f, family.unit(f, options, dataset))
             for f, (family, options) in requested.items() if family.unit is not None]
    units = [(f, u) for f, u in units if u is not None]
    if len(units) > 1:
        raise ValueError(f"fields {[f for f, _ in units]} each set a sample unit; set "
                         "unit= (and merge=) on one of them")
    return units[0][1] if units else None


@dataclass
class Assembly:
    """The producers of a Pipeline's fields and what the Pipeline does with their outputs.

    Attributes:
        producers: one per field, in the order of `fields`.
        families: field -> its Family.
        outputs: output key -> Output, of every producer.
        finishers: field -> applied to its output on the device (a cast, a memory format).
        parts: field -> output keys delivered as one list under the field's name (views).
        params: the plan's parameter sources (the unit's, then the producers').
        decisions: field -> {"backend", "options", "reason"} of fields with a choice of backend.
        primary: the producer of the first field whose family reports its backend in
            `PipelineStats.backend` (images), or None.
        threads, threads_reason: CPU decoder threads of the first producer that has any.
    """

    producers: list
    families: dict
    outputs: dict[str, Output] = field(default_factory=dict)
    finishers: dict[str, Callable] = field(default_factory=dict)
    parts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    params: tuple = ()
    decisions: dict[str, dict] = field(default_factory=dict)
    primary: tuple[Any, dict] | None = None
    threads: int = 0
    threads_reason: str = ""

    def close(self) -> None:
        """Close every producer (their threads, decoders and maps)."""
        for producer in self.producers:
            producer.close()
        self.producers = []

    def finish(self, batch: dict, transform: Callable | None, copy: bool) -> dict:
        """Output options applied on the device: each field's parts, then its finish (dtype
        cast, memory format), casts of stored fields, the transform, the copy.

        Args:
            batch: the batch's device views, by output key.
            transform: the Pipeline's `transform=`, or None.
            copy: deliver clones instead of views of the reused slots.
        """
        for name, keys in self.parts.items():
            batch[name] = [batch.pop(k) for k in keys]
        for key, finish in self.finishers.items():
            batch[key] = finish(batch[key])
        for key, output in self.outputs.items():
            if output.cast is not None:
                batch[key] = batch[key].to(output.cast)
        if transform is not None:
            batch = transform(batch)
            if not isinstance(batch, dict):
                raise TypeError(f"transform {transform!r:.80} returned "
                                f"{type(batch).__name__}, not the batch dict; return the batch "
                                "(e.g. `return {**batch, 'image': f(batch['image'])}`)")
        if copy:
            batch = {k: v.clone() if isinstance(v, torch.Tensor) else
                     [x.clone() if isinstance(x, torch.Tensor) else x for x in v]
                     for k, v in batch.items()}
        return batch


def assemble(requested: dict, context: FieldContext, batching_options: dict, unit,
             stages: StageTimes, fields: tuple) -> Assembly:
    """Build every requested field's producer.

    Args:
        requested: {field: (family, options)}.
        context: the FieldContext shared by the fields (its `batching` is filled per field).
        batching_options: producer options the batching adds, per field.
        unit: the Pipeline's sample unit, or None.
        stages: the Pipeline's stage timers, given to producers that time their own parts.
        fields: the requested field names (for messages).
    """
    from dataclasses import replace

    built_all = Assembly([], {f: family for f, (family, _) in requested.items()})
    try:
        for f, (family, options) in requested.items():
            built = family.build(f, options, replace(context,
                                                     batching=batching_options.get(f, {})))
            producer = create_producer(built.spec)
            if hasattr(producer, "stages"):  # it times its own parts (pipelines/_common/_stages.py)
                producer.stages = stages
            # a unit may address samples that are not dataset rows (segments)
            built_all.producers.append(producer if unit is None else unit.view(producer))
            if built.finish is not None:
                built_all.finishers[f] = built.finish
            if built.parts:
                built_all.parts[f] = built.parts
            if built.decision is not None:
                built_all.decisions[f] = built.decision
                if family.reports_backend and built_all.primary is None:
                    built_all.primary = (producer, built.decision)
        for producer in built_all.producers:
            outputs = producer.outputs()
            clash = sorted(set(outputs) & set(built_all.outputs))
            if clash:  # e.g. a stored field named like another field's extra output ("ar")
                raise ValueError(f"fields {fields} give the output key(s) {clash} twice "
                                 "(a field named like another field's extra output); leave "
                                 "one of them out of fields=")
            built_all.outputs.update(outputs)
        check_ring_memory(context.prefetch + 2, context.batch_size, built_all.outputs,
                          context.dataset.path)
        units = () if unit is None else (unit,)
        built_all.params = _unique([*units, *(s for p in built_all.producers
                                              for s in p.param_sources())])
        threaded = next((p for p in built_all.producers if getattr(p, "threads", None)), None)
        if threaded is not None:
            built_all.threads = int(threaded.threads)
            built_all.threads_reason = getattr(threaded, "threads_reason", "")
    except BaseException:
        built_all.close()
        raise
    return built_all


class EpochSizes:
    """Samples per epoch and their durations: a pure function of (seed, epoch).

    Args:
        dataset: the open dataset.
        unit: the sample unit, or None (rows).
        sampler: a source's own epoch order (chute.mix, ShardWindows), or None.
    """

    def __init__(self, dataset, unit, sampler) -> None:
        self.dataset, self.unit, self.sampler = dataset, unit, sampler
        self._durations: dict = {}  # (seed, epoch) -> seconds of every sample

    def count(self, seed: int, epoch: int) -> int:
        """Samples of epoch `epoch` (merged segments depend on it).

        Args:
            seed, epoch: the epoch.
        """
        if self.sampler is not None:
            return int(self.sampler.count)
        return len(self.dataset) if self.unit is None else self.unit.count(seed, epoch)

    def durations(self, seed: int, epoch: int, assembly: Assembly | None) -> np.ndarray:
        """Seconds every sample of the epoch delivers (what MaxDuration packs): a producer's
        `seconds` when it has one (audio: after speed perturbation and resampling), else the
        stored durations.

        Args:
            seed, epoch: the epoch.
            assembly: the Pipeline's producers (None while they are being built).
        """
        key = (seed, epoch)
        if key not in self._durations:
            self._durations.clear()  # one epoch at a time
            producers = assembly.producers if assembly is not None else ()
            timed = [p for p in producers if getattr(p, "seconds", None) is not None]
            if timed and assembly is not None:
                ids = np.arange(self.count(seed, epoch), dtype=np.int64)
                params: dict = {}
                for source in assembly.params:
                    params.update(source(seed, epoch, ids))
                found = np.max([p.seconds(params) for p in timed], axis=0)
            else:
                found = None if self.unit is None else \
                    self.unit.durations(self.dataset, seed, epoch)
                if found is None:
                    found = _stored_durations(self.dataset)
            self._durations[key] = found
        return self._durations[key]


def _stored_durations(dataset) -> np.ndarray:
    """The rows' `duration` column (seconds), what MaxDuration packs without a unit."""
    if "duration" not in dataset.fields:  # (column() would raise a raw KeyError)
        raise ValueError(f"batching=MaxDuration(...) packs samples by their `duration` "
                         f"column, which {dataset.path} lacks (`chute convert audio` "
                         "and `chute convert video` store one); use batch_size without "
                         "batching= for this dataset")
    return np.asarray(dataset.column("duration"), np.float64)


def _unique(items) -> tuple:
    """Distinct parameter sources in first-seen order (two image fields share their crops)."""
    found: list = []
    for item in items:
        if item not in found:
            found.append(item)
    return tuple(found)
