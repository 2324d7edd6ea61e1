"""Pipeline: what a training loop iterates -- batches of a dataset's fields as torch tensors:
decoded, augmented images, video clips, audio, stored arrays (latents), scalar columns,
metadata.

Batches are reused: the tensors of the batch returned by the k-th `next()` live in a
preallocated slot that stays valid until the (k+2)-th `next()` call begins (so the batch you
are training on and the previous one are both intact); after that the slot is refilled, so
`list(pipe)` would hold overwritten batches. Keep a batch longer with `.clone()`, or pass
`copy=True`. With a CUDA device, work queued on the current stream before the (k+2)-th `next()`
is waited for before the slot is overwritten.

Epochs and resume: see `set_epoch`, `state_dict` and `load_state_dict`. An epoch is finished
when its last batch is handed out; iterating again then starts the next epoch (so forgetting
`set_epoch` never repeats an order, and stopping after `len(pipe)` batches loses nothing).

The core knows no modality: each requested field's family (`producers/_registry.py`) turns its
options into a producer, the batching (`sampling/_batching.py`) cuts the epoch into batches,
and the plan evaluates the per-sample parameters the producers ask for (docs/design.md,
"Plans and producers").
"""

from __future__ import annotations

import atexit
import operator
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from chute._fork import ProcessLock
from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute.pipelines._compat import translate
from chute.pipelines._distributed import detect_rank_world, resolve_device
from chute.pipelines._fields import field_options
from chute.pipelines._options import check_ring_memory
from chute.pipelines._run import Run, SpareSlots
from chute.pipelines._stages import StageTimes
from chute.pipelines._staging import device_views, wait_ready
from chute.pipelines.producers._contract import Output
from chute.pipelines.producers._family import FieldContext
from chute.pipelines.producers._registry import create_producer
from chute.pipelines.producers._tune_runner import use_pipeline
from chute.pipelines.sampling._batching import (
    Batching,
    FixedBatches,
    Plan,
    PlanContext,
    as_batching,
)
from chute.pipelines.sampling._units import ByRecording, sample_durations
from chute.pipelines.sampling._windows import ShardWindows
from chute.readers import DatasetProtocol

__all__ = ["Pipeline", "PipelineStats", "IMAGENET_MEAN", "IMAGENET_STD"]


@dataclass
class PipelineStats:
    samples: int = 0  # samples handed to the training loop by this rank
    batches: int = 0
    # samples that failed to decode (on_error="skip"): replaced in train, left out in eval
    decode_errors: int = 0
    skipped: list = field(default_factory=list)  # ids of the samples eval left out, in order
    wait_seconds: float = 0.0  # time the training loop spent waiting for batches
    backend: str = ""  # the first image field's backend (what backend="auto" chose)
    backend_options: dict = field(default_factory=dict)
    backend_reason: str = ""  # why that backend: requested, stored decision, or measured
    threads: int = 0  # CPU decoder threads of this process (0: no CPU decoding)
    threads_reason: str = ""  # where that number comes from
    # field -> {"backend", "options", "reason"} for every field with a choice of backend
    field_backends: dict = field(default_factory=dict)
    # wall and CPU seconds per stage of every batch (docs/pipeline.md, "Stage timers")
    stages: StageTimes = field(default_factory=StageTimes)


class Pipeline:
    """Iterate batches of a dataset as dicts of torch tensors.

    Batches are reused: a yielded batch is overwritten two `next()` calls later. Keep it with
    `batch["image"].clone()` or pass `copy=True` (`list(pipe)` without it holds stale data).

    Each batch holds "index" (int64 global sample ids) and one entry per requested field:
    images decoded and augmented ([B,3,H,W] or [B,H,W,3]), video clips, audio, ndarray fields
    as ``[B, *shape]`` (ragged ones zero-padded, with "<field>_lengths"), scalar fields as [B]
    tensors, JSON and other bytes fields as lists. `len(pipe)` is this rank's batches per
    full epoch.

    Args:
        source: a dataset folder, URL or an open dataset (anything meeting
            `chute.readers.DatasetProtocol`: a chute dataset, a zarr group, a Megatron pair), or
            `chute.mix(...)` of several, interleaved by weight (batches then carry "source").
        batch_size: samples per batch (per rank); with `MaxDuration` the most in one batch;
            None with `Buckets` (each bucket has its own).
        fields: the fields to deliver: names (each with its kind's default options) or
            {name: options or None}, the options being `ImageOptions`, `VideoOptions`,
            `AudioOptions`, `ArrayOptions` or `Lookup` as the field's kind takes; options of
            another kind raise. Default: "image" (and "label") for a dataset with an "image"
            field, else every field except metadata and tables.
        batching: None (`batch_size` samples per batch), `MaxDuration(seconds)` or
            `Buckets(config)`.
        augment: "train" (random crops, clips and perturbations; drops the tail) or "eval"
            (deterministic; every sample once, a sample that fails under on_error="skip" left
            out).
        device: "cpu", "cuda" or "cuda:N" (default: the current CUDA device when there is one).
        seed: seeds the order and every random choice (a pure function of seed, epoch, sample).
        shuffle: False delivers the dataset's own order (e.g. a sequential evaluation);
            `ShardWindows(shards=k)` shuffles the shards, then the samples within windows of
            k shards (a dataset in object storage larger than its node cache: docs/storage.md).
        drop_last: drop the incomplete last batch (default: True in train, False in eval).
        rank: this process's DDP rank (default: from torch.distributed / the environment).
        world_size: the DDP world size (same default).
        prefetch: batches prepared ahead of the training loop.
        on_error: "skip" replaces a failing sample deterministically in train and leaves it
            out in eval (a batch then has fewer rows; never a sample twice); "raise" stops.
        transform: `callable(batch) -> batch` run on every batch on the output device, after
            the fields' casts (e.g. torchvision.transforms.v2 or kornia on GPU tensors).
        copy: deliver batches the training loop owns (a copy each; slower) instead of views of
            the reused slots.
        **round2: the round-2 keywords (image_size, backend, dtype, layout, mean, std,
            backend_options, crop, eval_crop, memory_format, field_options, buckets, unit,
            max_duration, merge, lookups) still work for this release, with a
            DeprecationWarning that shows the new spelling.
    """

    def __init__(self, source: str | Path | Any, batch_size: int | None = None, *,
                 fields: Sequence[str] | Mapping[str, Any] | None = None,
                 batching: Batching | None = None,
                 augment: Literal["train", "eval"] = "train",
                 device: str | torch.device | None = None, seed: int = 0,
                 shuffle: bool | ShardWindows = True, drop_last: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, prefetch: int = 2,
                 on_error: Literal["skip", "raise"] = "skip",
                 transform: Callable[[dict], dict] | None = None, copy: bool = False,
                 **round2: Any):
        from chute.readers import open_dataset

        self._producers: list | None = None
        self._closed = True  # until construction succeeds (close() may run from __del__)
        if isinstance(source, (list, tuple, set, dict)):
            raise TypeError(f"source must be one dataset (a folder, URL or open dataset), got a "
                            f"{type(source).__name__} of {len(source)}; mix datasets with "
                            "chute.mix({'a': path_a, 'b': path_b}, weights={'a': 0.7, 'b': "
                            "0.3}) (docs/mixing.md)")
        if not isinstance(source, (str, Path, DatasetProtocol)):
            # Optional capabilities are read as attributes (docs/design.md), so an object
            # lacking one must be refused here, not fail with an AttributeError mid-epoch.
            raise TypeError(f"source {source!r:.80} ({type(source).__name__}) is not a chute "
                            "dataset: pass a folder or URL, an open_dataset(...) result, or an "
                            "object of a class that subclasses chute.readers.DatasetProtocol "
                            "(which supplies the optional capabilities' defaults)")
        self._own_dataset = isinstance(source, (str, Path))
        self.dataset: DatasetProtocol = (open_dataset(source) if isinstance(source, (str, Path))
                                         else source)
        try:
            self._build(batch_size, fields, batching, augment, device, seed, shuffle, drop_last,
                        rank, world_size, prefetch, on_error, transform, copy, round2)
        except BaseException:
            self._close_producers()
            if self._own_dataset:
                self.dataset.close()
            raise

    def _build(self, batch_size, fields, batching, augment, device, seed, shuffle, drop_last,
               rank, world_size, prefetch, on_error, transform, copy, round2) -> None:
        if augment not in ("train", "eval"):
            raise ValueError(f"augment must be 'train' or 'eval', got {augment!r}")
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable(batch) -> batch, got {transform!r}")
        if round2:
            batch_size, fields, batching = translate(self.dataset, batch_size, fields, batching,
                                                     round2)
        requested = field_options(self.dataset, fields)
        self.fields = tuple(requested)
        self.augment = augment
        try:  # an integer of any kind (numpy, a 0-d tensor); int("a") said "invalid literal"
            self.seed = operator.index(seed)
        except TypeError:
            raise TypeError(f"Pipeline seed must be an integer, got {seed!r}") from None
        if not isinstance(shuffle, (bool, np.bool_, ShardWindows)):  # bool("yes") is True
            raise TypeError(f"Pipeline shuffle must be True, False or ShardWindows(...), got "
                            f"{shuffle!r}")
        windows = shuffle if isinstance(shuffle, ShardWindows) else None
        self.shuffle = bool(shuffle)
        self.drop_last = augment == "train" if drop_last is None else bool(drop_last)
        self.rank, self.world_size = detect_rank_world(rank, world_size)
        self.device = resolve_device(device)
        self.on_error = on_error
        if int(prefetch) < 1:
            raise ValueError(f"need prefetch >= 1, got {prefetch}")
        self.prefetch = int(prefetch)
        self.transform = transform
        self.copy = bool(copy)
        self.batching = as_batching(batching).bind(
            {f: (family.name, options) for f, (family, options) in requested.items()})
        self.batch_size = self.batching.slot_size(batch_size)
        self._unit = self._sample_unit(requested)
        # a source with its own epoch order (chute.mix): which rows each epoch holds
        self._sampler = self.dataset.sampler
        if windows is not None:
            if self._sampler is not None or self._unit is not None or \
                    not isinstance(self.batching, FixedBatches):
                raise ValueError(f"{self.dataset.path}: shuffle=ShardWindows(...) orders whole "
                                 "samples of one dataset in fixed batches; it is not available "
                                 "with chute.mix, MaxDuration, Buckets or audio segment units")
            self._sampler = windows.bind(self.dataset)
        if self._sampler is not None and (self._unit is not None
                                          or not isinstance(self.batching, FixedBatches)):
            raise ValueError(f"{self.dataset.path}: a chute.mix source takes fixed batches of "
                             "whole rows; MaxDuration, Buckets and audio segment units are not "
                             "available with it (build one Pipeline per dataset for them)")
        self._durations: dict = {}  # (seed, epoch) -> seconds of every sample (MaxDuration)
        self._epoch, self._position = 0, 0
        self._params: tuple = ()  # the plan's parameter sources (set by _build_producers)
        self._batch_state: dict = {}  # the batching's own resume state (e.g. bucket offsets)
        if self._n == 0:
            raise ValueError(f"dataset {self.dataset.path} holds no samples; check how it was "
                             "converted (`chute info`, and skipped.tsv next to it)")
        self._build_producers(requested)
        self._check_not_empty()
        self._resume_pending = False
        self._abandoned = False  # the last pass stopped before its epoch's end
        self._pass_start: tuple[int, dict] | None = None  # where the last pass started
        self._warned = False
        self._run: Run | None = None
        self._run_thread: threading.Thread | None = None
        self._spare_slots: SpareSlots | None = None  # the last pass's slots, for the next
        self._lock = ProcessLock()  # free again in a forked child
        self._pid = os.getpid()
        self._closed = False
        _LIVE.add(self)

    def _sample_unit(self, requested: dict):
        """The sample unit a field's options ask for (audio segments), else None (rows)."""
        units = [(f, family.unit(f, options, self.dataset))
                 for f, (family, options) in requested.items() if family.unit is not None]
        units = [(f, u) for f, u in units if u is not None]
        if len(units) > 1:
            raise ValueError(f"fields {[f for f, _ in units]} each set a sample unit; set "
                             "unit= (and merge=) on one of them")
        return units[0][1] if units else None

    def _build_producers(self, requested: dict) -> None:
        extra = self.batching.field_options()
        self._producers = []
        self._families = {f: family.name for f, (family, _) in requested.items()}
        self._finishers: dict[str, Callable] = {}
        self._parts: dict[str, tuple[str, ...]] = {}  # field -> output keys delivered as a list
        self.stats = PipelineStats()
        self.backend = None  # the first image field's producer (round-2 attribute)
        by_recording = self._unit is not None and self._unit.name == "segment"
        for f, (family, options) in requested.items():
            context = FieldContext(self.dataset, self.batch_size, str(self.device),
                                   self.prefetch, self.augment, self._unit, extra.get(f, {}))
            built = family.build(f, options, context)
            producer = create_producer(built.spec)
            if hasattr(producer, "stages"):  # it times its own parts (pipelines/_stages.py)
                producer.stages = self.stats.stages
            # segments: the plan's ids are segment ids; fields are read from the recording
            self._producers.append(ByRecording(producer) if by_recording else producer)
            if built.finish is not None:
                self._finishers[f] = built.finish
            if built.parts:
                self._parts[f] = built.parts
            if built.decision is not None:
                self.stats.field_backends[f] = built.decision
                if family.name == "image" and self.backend is None:
                    self.backend = producer
                    self.stats.backend = built.decision["backend"]
                    self.stats.backend_options = dict(built.decision["options"])
                    self.stats.backend_reason = built.decision["reason"]
        self._outputs: dict[str, Output] = {}
        for producer in self._producers:
            outputs = producer.outputs()
            clash = sorted(set(outputs) & set(self._outputs))
            if clash:  # e.g. a stored field named like another field's extra output ("ar")
                raise ValueError(f"fields {self.fields} give the output key(s) {clash} twice "
                                 "(a field named like another field's extra output); leave "
                                 "one of them out of fields=")
            self._outputs.update(outputs)
        check_ring_memory(self.prefetch + 2, self.batch_size, self._outputs, self.dataset.path)
        units = () if self._unit is None else (self._unit,)
        self._params = _unique([*units, *(s for p in self._producers for s in p.param_sources())])
        threaded = next((p for p in self._producers if getattr(p, "threads", None)), None)
        if threaded is not None:
            self.stats.threads = int(threaded.threads)
            self.stats.threads_reason = getattr(threaded, "threads_reason", "")

    @property
    def _n(self) -> int:
        """Samples of the current epoch."""
        return self._count(self.seed, self._epoch)

    def _count(self, seed: int, epoch: int) -> int:
        """Samples of epoch `epoch` (merged segments: a pure function of seed and epoch)."""
        if self._sampler is not None:
            return int(self._sampler.count)
        return len(self.dataset) if self._unit is None else self._unit.count(seed, epoch)

    def _durations_of(self, seed: int, epoch: int) -> np.ndarray:
        """Seconds every sample of the epoch delivers (what MaxDuration packs): a producer's
        `seconds` when it has one (audio: after speed perturbation and resampling), else
        the stored durations."""
        key = (seed, epoch)
        if key not in self._durations:
            self._durations.clear()  # one epoch at a time
            timed = [p for p in self._producers or () if getattr(p, "seconds", None) is not None]
            if timed:
                ids = np.arange(self._count(seed, epoch), dtype=np.int64)
                params: dict = {}
                for source in self._params:
                    params.update(source(seed, epoch, ids))
                found = np.max([p.seconds(params) for p in timed], axis=0)
            else:
                found = sample_durations(self.dataset, self._unit, seed, epoch)
            self._durations[key] = found
        return self._durations[key]

    def _check_not_empty(self) -> None:
        plan = self.plan(0)  # a sample longer than MaxDuration as delivered raises here
        if self.drop_last and len(plan) == 0:
            n = self._n
            raise ValueError(
                f"batch_size={self.batch_size} on {self.world_size} rank(s) gives no full batch "
                f"of the {n} samples of {self.dataset.path} (train drops the incomplete tail); "
                f"use batch_size <= {max(1, n // self.world_size)} or drop_last=False")

    # ---- epochs and state ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning -- unless a state just loaded by
        `load_state_dict` is for this same epoch, in which case it continues where it stopped."""
        self._stop_run()
        if self._resume_pending and int(epoch) == self._epoch:
            return
        self._epoch, self._position, self._resume_pending = int(epoch), 0, False
        self._batch_state = {}
        self._abandoned, self._pass_start = False, None

    def state_dict(self) -> dict:
        """{seed, epoch, position, fingerprint, ...}: position = samples of this epoch handed to
        the training loop by all ranks together (batches delivered on this rank x batch size x
        world size). Once an epoch's last batch is handed out the state is the next epoch's
        start (epoch + 1, position 0), so resuming never replays an empty epoch. Prefetched
        batches are not counted. Ranks run in lockstep under DDP, so any rank's state is the
        job's state. `fingerprint` names the dataset, which `load_state_dict` checks; the
        batching adds its own keys (Buckets: "bucket_offsets")."""
        epoch, position, extra = self._epoch, self._position, self._batch_state
        if position >= self._n:
            epoch, position, extra = epoch + 1, 0, {}
        return {"seed": self.seed, "epoch": epoch, "position": position,
                "fingerprint": self.dataset.fingerprint, **extra}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly at `state` -- in O(1), with any world size: the positions
        [position, N) of that epoch are re-partitioned across the current ranks. A state
        saved at the end of an epoch continues with the next epoch."""
        seed, epoch, position = self._checked_state(state)
        n = self._count(seed, epoch)
        extra = self.batching.load_state(
            state, position, n, f"Pipeline.load_state_dict on dataset {self.dataset.path}")
        self._stop_run()
        if position >= n:
            epoch, position, extra = epoch + 1, 0, {}
        self.seed, self._epoch, self._position = seed, epoch, position
        self._batch_state = dict(extra)
        self._resume_pending = True
        self._abandoned, self._pass_start = False, None

    def _checked_state(self, state) -> tuple[int, int, int]:
        where = f"Pipeline.load_state_dict on dataset {self.dataset.path}"
        if not isinstance(state, dict) or not {"seed", "epoch", "position"} <= set(state):
            raise ValueError(f"{where}: expected the dict of Pipeline.state_dict() (seed, "
                             f"epoch, position), got {state!r:.200}")
        fingerprint = state.get("fingerprint")  # states saved before it was stored lack it
        known = (self.dataset.fingerprint, *self.dataset.earlier_fingerprints)
        if fingerprint is not None and fingerprint not in known:
            raise ValueError(f"{where}: the state was saved for another dataset (fingerprint "
                             f"{fingerprint}, this one is {self.dataset.fingerprint}); load the "
                             "state of a Pipeline over this dataset")
        try:
            seed, epoch, position = (int(state[k]) for k in ("seed", "epoch", "position"))
        except (TypeError, ValueError):
            raise ValueError(f"{where}: seed, epoch and position must be integers, got "
                             f"{state!r:.200}") from None
        if epoch < 0 or not 0 <= position <= self._count(seed, epoch):
            raise ValueError(f"{where}: state position {position} (epoch {epoch}) is outside "
                             f"[0, {self._count(seed, max(epoch, 0))}]; was it saved for "
                             "another dataset?")
        return seed, epoch, position

    def plan(self, start_position: int | None = None) -> Plan:
        """This rank's plan of the current epoch from `start_position` (default: now), made by
        the Pipeline's batching (a BatchPlan, DurationPlan or BucketPlan)."""
        start = self._position if start_position is None else start_position
        state = self._batch_state if start_position is None else {}
        seed, epoch = self.seed, self._epoch
        context = PlanContext(
            dataset=self.dataset, n=self._n, seed=seed, epoch=epoch, rank=self.rank,
            world_size=self.world_size, batch_size=self.batch_size, drop_last=self.drop_last,
            shuffle=self.shuffle, augment=self.augment, start_position=start, state=state,
            params=self._params, durations=lambda: self._durations_of(seed, epoch),
            sampler=self._sampler)
        return self.batching.plan(context)

    def __len__(self) -> int:
        return len(self.plan(0))

    def as_dataloader(self) -> torch.utils.data.DataLoader:
        """This Pipeline as a `torch.utils.data.DataLoader` (for Lightning, Accelerate and other
        code that expects one): batches pass through unchanged (`batch_size=None`,
        `num_workers=0`), `len()` works, and `loader.sampler.set_epoch(e)` (what Lightning calls
        each epoch) reaches `set_epoch`. `loader.dataset` is a `PipelineDataset`
        (an `IterableDataset`) for building your own DataLoader the same way."""
        from chute.pipelines._torch_data import as_dataloader

        return as_dataloader(self)

    # ---- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._closed:
            raise RuntimeError("this Pipeline is closed; create a new one")
        return self._iterate()

    def _start(self) -> tuple[Run, Plan]:
        """Begin a pass at the first `next()` (not at `iter()`: DataLoader and Lightning create
        the iterator before they call `set_epoch`)."""
        self._forget_parent_run()
        with self._lock:
            if self._closed:
                raise RuntimeError("this Pipeline is closed; create a new one")
            owner = self._run_thread
            if (self._run is not None and owner is not None and owner is not
                    threading.current_thread() and owner.is_alive()):
                raise RuntimeError(
                    f"this Pipeline is already being iterated by thread {owner.name!r}; one "
                    "Pipeline feeds one loop at a time (create one Pipeline per thread)")
            # a pass left unfinished (Lightning's sanity check takes 2 batches) is taken again
            # from its start: a new iter() never skips what the abandoned one did not deliver
            abandoned = self._run is not None or self._abandoned
            self._stop_run()
            if abandoned and not self._resume_pending and self._pass_start is not None:
                self._position, self._batch_state = self._pass_start
            self._abandoned = False
            if self._position >= self._n:
                self._epoch, self._position = self._epoch + 1, 0  # previous epoch finished
                self._batch_state = {}
            self._resume_pending = False
            self._pass_start = (self._position, dict(self._batch_state))
            plan = self.plan()
            spare, self._spare_slots = self._spare_slots, None
            run = Run(self, plan, spare)
            self._run, self._run_thread = run, threading.current_thread()
        return run, plan

    def _iterate(self):
        run, plan = self._start()
        # slots of the batches yielded last and before last: still valid (at first, those of
        # the previous pass, when this one reuses its slots)
        held = list(run.inherited)
        try:
            for k in range(len(plan)):
                while len(held) > 1:
                    run.release(held.pop(0))  # the batch before the previous one expires now
                t0 = time.perf_counter()
                try:
                    slot, (shapes, lists, replaced) = run.get()
                except StopIteration:  # the run was stopped under us
                    if self._closed:
                        return  # close() during the loop ends it
                    raise RuntimeError(
                        "this iterator of the Pipeline was stopped by a newer pass (iter(), "
                        "set_epoch or load_state_dict); iterate the new one") from None
                waited = time.perf_counter() - t0
                self.stats.wait_seconds += waited
                self.stats.stages.add("wait", waited)
                held.append(slot)
                wait_ready(slot)
                self._note_replaced(replaced)
                batch = device_views(slot, shapes)
                batch.update(lists)
                n = shapes["index"][0]
                # the epoch ends with its last batch (a dropped tail counts as done)
                last = k + 1 == len(plan)
                self._position = self._n if last else plan.position_after(k + 1)
                self._batch_state = {} if last else plan.state_after(k + 1)
                self.stats.samples += n
                self.stats.batches += 1
                yield self._finish(batch)
            self._position = self._n
        finally:
            run.close()
            if not self._closed and self._pid == os.getpid():
                self._spare_slots = run.spare_slots(held)
            if self._run is run:
                self._run = self._run_thread = None
                # a pass the parent started is not abandoned by a forked child: the child's
                # next pass continues where the parent's stood (as state_dict() says)
                self._abandoned = (self._position < self._n and not self._closed
                                   and self._pid == os.getpid())

    def _finish(self, batch: dict) -> dict:
        """Output options applied on the device: each field's finish (dtype cast, memory
        format), casts of stored fields, the transform, the copy. A field with parts (an image
        field's views) becomes the list of its parts first."""
        for name, keys in self._parts.items():
            batch[name] = [batch.pop(k) for k in keys]
        for key, finish in self._finishers.items():
            batch[key] = finish(batch[key])
        for key, output in self._outputs.items():
            if output.cast is not None:
                batch[key] = batch[key].to(output.cast)
        if self.transform is not None:
            batch = self.transform(batch)
            if not isinstance(batch, dict):
                raise TypeError(f"transform {self.transform!r:.80} returned "
                                f"{type(batch).__name__}, not the batch dict; return the batch "
                                "(e.g. `return {**batch, 'image': f(batch['image'])}`)")
        if self.copy:
            batch = {k: v.clone() if isinstance(v, torch.Tensor) else
                     [x.clone() if isinstance(x, torch.Tensor) else x for x in v]
                     for k, v in batch.items()}
        return batch

    def _note_replaced(self, replaced: list) -> None:
        """Count the failed samples of a batch ((failed id, substitute id or None when eval
        left it out, reason), ...) and warn at the first."""
        if not replaced:
            return
        self.stats.decode_errors += len(replaced)
        self.stats.skipped.extend(bad for bad, sub, _ in replaced if sub is None)
        if not self._warned:
            self._warned = True
            bad, sub, reason = replaced[0]
            why = f" ({reason})" if reason else ""
            done = (f"replaced by sample {sub}" if sub is not None else
                    "left out of this eval pass (eval never delivers a sample twice; its ids "
                    "are in pipe.stats.skipped)")
            warnings.warn(
                f"chute: sample {bad} ({self._describe(bad)}) of {self.dataset.path} "
                f"could not be decoded{why}; {done}. Further failures are "
                "counted in pipe.stats.decode_errors without warning; run `chute verify` on the "
                "dataset.",
                RuntimeWarning, stacklevel=3,
            )

    def _describe(self, sample_id: int) -> str:
        """Where sample `sample_id` is (its segment and recording when samples are segments)."""
        epoch = (self.seed, self._epoch)
        where = "" if self._unit is None else self._unit.describe(sample_id, *epoch)
        row = sample_id if self._unit is None else int(self._unit.recording([sample_id],
                                                                            *epoch)[0])
        shard, local = self.dataset.locate(row)
        return f"{where}shard {shard}, local index {local}"

    # ---- lifetime --------------------------------------------------------------------------

    def _forget_parent_run(self) -> None:
        """In a forked child: the parent's pass and its prefetch thread do not exist here, and
        the lock may have been held by a parent thread (docs/design.md, "Processes and
        threads")."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._run = self._run_thread = None

    def _stop_run(self) -> None:
        self._forget_parent_run()
        if self._run is not None:
            self._run.close()
            self._run = None

    def close(self) -> None:
        """Stop the prefetch thread, free the slots and close the producers (and the dataset
        when the Pipeline opened it); the pipeline cannot be iterated again."""
        self._closed = True
        self._stop_run()
        self._spare_slots = None
        if self._producers is not None:
            producers, self._producers = self._producers, None
            for producer in producers:
                producer.close()
            self.backend = None
            if self._own_dataset:
                self.dataset.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # At interpreter exit the atexit hook has closed every Pipeline; a __del__ running
        # during finalization must take no lock (a frozen daemon thread may hold it) and may
        # find module globals already None.
        try:
            if not _finalizing():
                self.close()
        except Exception:
            pass

    def __getitem__(self, index):
        raise TypeError("a Pipeline is iterable, not indexable: iterate it, or pass "
                        "pipe.as_dataloader() where a torch DataLoader is expected "
                        "(DataLoader(pipe) would index it)")

    def _close_producers(self) -> None:
        for producer in self._producers or ():
            producer.close()

_LIVE: weakref.WeakSet = weakref.WeakSet()  # Pipelines not yet closed, closed at exit


def _finalizing() -> bool:
    return sys.is_finalizing()


@atexit.register
def _close_live_pipelines() -> None:
    """Close every open Pipeline while the interpreter is whole: its prefetch thread is stopped
    and joined before daemon threads are frozen (a frozen one may hold a lock close() needs)."""
    for pipe in list(_LIVE):
        try:
            pipe.close()
        except Exception:
            pass


def _unique(items) -> tuple:
    """Distinct parameter sources in first-seen order (two image fields share their crops)."""
    found: list = []
    for item in items:
        if item not in found:
            found.append(item)
    return tuple(found)


use_pipeline(Pipeline)  # backend="auto" measures its candidates through Pipelines
