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
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from chute._fork import ProcessLock
from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute.pipelines._assembly import Assembly, EpochSizes, assemble, sample_unit
from chute.pipelines._bad_samples import BadSamples, describe_sample
from chute.pipelines._common._distributed import detect_rank_world, resolve_device
from chute.pipelines._common._stages import StageTimes
from chute.pipelines._compat import order_from_shuffle, translate
from chute.pipelines._cursor import EpochCursor, checked_state
from chute.pipelines._fields import field_options
from chute.pipelines._order import Order, check_order, epoch_order
from chute.pipelines._run import Run, RunSettings, SpareSlots
from chute.pipelines.producers._family import FieldContext
from chute.pipelines.producers._tune_runner import use_pipeline
from chute.pipelines.sampling._batching import Batching, Plan, PlanContext, as_batching
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
        batch_size: samples per batch (per rank); None with `MaxDuration` (its
            `max_samples`) and `Buckets` (each bucket has its own).
        fields: the fields to deliver: names (each with its kind's default options) or
            {name: options or None}, the options being `ImageOptions`, `VideoOptions`,
            `AudioOptions`, `ArrayOptions` or `Lookup` as the field's kind takes; options of
            another kind raise. Default: "image" (and "label") for a dataset with an "image"
            field, else every field except metadata and tables.
        batching: None (`batch_size` samples per batch), `MaxDuration(seconds,
            max_samples=N)` or `Buckets(config)`.
        augment: "train" (random crops, clips and perturbations; drops the tail) or "eval"
            (deterministic; every sample once, a sample that fails under on_error="skip" left
            out).
        device: "cpu", "cuda" or "cuda:N" (default: the current CUDA device when there is one).
        seed: seeds the order and every random choice (a pure function of seed, epoch, sample).
        order: "shuffle" (the default: a keyed global shuffle, new each epoch), "sequential" (the
            dataset's own order, e.g. a sequential evaluation) or `ShardWindows(shards=k)`
            (the shards shuffled, then the samples within windows of k shards: a dataset in
            object storage larger than its node cache, docs/storage.md).
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
            max_duration, merge, lookups) and round 3's shuffle= still work for this release,
            with a DeprecationWarning that shows the new spelling.
    """

    def __init__(self, source: str | Path | Any, batch_size: int | None = None, *,
                 fields: Sequence[str] | Mapping[str, Any] | None = None,
                 batching: Batching | None = None,
                 augment: Literal["train", "eval"] = "train",
                 device: str | torch.device | None = None, seed: int = 0,
                 order: Order | None = None, drop_last: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, prefetch: int = 2,
                 on_error: Literal["skip", "raise"] = "skip",
                 transform: Callable[[dict], dict] | None = None, copy: bool = False,
                 **round2: Any):
        from chute.readers import open_dataset

        self._assembly: Assembly | None = None
        self._closed = True  # until construction succeeds (close() may run from __del__)
        _check_source(source)
        self._own_dataset = isinstance(source, (str, Path))
        self.dataset: DatasetProtocol = (open_dataset(source) if isinstance(source, (str, Path))
                                         else source)
        try:
            self._build(batch_size, fields, batching, augment, device, seed, order, drop_last,
                        rank, world_size, prefetch, on_error, transform, copy, round2)
        except BaseException:
            if self._assembly is not None:
                self._assembly.close()
            if self._own_dataset:
                self.dataset.close()
            raise

    def _build(self, batch_size, fields, batching, augment, device, seed, order, drop_last,
               rank, world_size, prefetch, on_error, transform, copy, round2) -> None:
        self.seed = _check_arguments(augment, on_error, transform, seed, prefetch)
        self.order = _order_of(order, round2)
        if round2:
            batch_size, fields, batching = translate(self.dataset, batch_size, fields, batching,
                                                     round2)
        requested = field_options(self.dataset, fields)
        self.fields = tuple(requested)
        self.augment, self.on_error, self.transform = augment, on_error, transform
        self.drop_last = augment == "train" if drop_last is None else bool(drop_last)
        self.rank, self.world_size = detect_rank_world(rank, world_size)
        self.device = resolve_device(device)
        self.prefetch, self.copy = int(prefetch), bool(copy)
        self.batching = as_batching(batching).bind(
            {f: (family.name, options) for f, (family, options) in requested.items()})
        self.batch_size = self.batching.slot_size(batch_size)
        self._unit = sample_unit(requested, self.dataset)
        self.shuffle, sampler = epoch_order(self.dataset, self.order, self._unit, self.batching)
        self._sizes = EpochSizes(self.dataset, self._unit, sampler)
        self._cursor = EpochCursor()
        if self._n == 0:
            raise ValueError(f"dataset {self.dataset.path} holds no samples; check how it was "
                             "converted (`chute info`, and skipped.tsv next to it)")
        self.stats = PipelineStats()
        context = FieldContext(self.dataset, self.batch_size, str(self.device), self.prefetch,
                               self.augment, self._unit)
        self._assembly = assemble(requested, context, self.batching.field_options(),
                                  self._unit, self.stats.stages, self.fields)
        self.backend = _report_backends(self._assembly, self.stats)  # round-2 attribute
        _check_not_empty(self.plan(0), self)  # a sample longer than MaxDuration raises here
        self._bad = BadSamples(self.stats, self.dataset.path)
        self._run: Run | None = None
        self._run_thread: threading.Thread | None = None
        self._spare_slots: SpareSlots | None = None  # the last pass's slots, for the next
        self._lock = ProcessLock()  # free again in a forked child
        self._pid = os.getpid()
        self._closed = False
        _LIVE.add(self)

    @property
    def _n(self) -> int:  # samples of the current epoch
        return self._sizes.count(self.seed, self._cursor.epoch)

    # ---- epochs and state ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning -- unless a state just loaded by
        `load_state_dict` is for this same epoch, in which case it continues where it stopped."""
        self._stop_run()
        self._cursor.set_epoch(int(epoch))

    def state_dict(self) -> dict:
        """{seed, epoch, position, fingerprint, ...}: position = samples of this epoch handed to
        the training loop by all ranks together (batches delivered on this rank x batch size x
        world size). Once an epoch's last batch is handed out the state is the next epoch's
        start (epoch + 1, position 0), so resuming never replays an empty epoch. Prefetched
        batches are not counted. Ranks run in lockstep under DDP, so any rank's state is the
        job's state. `fingerprint` names the dataset, which `load_state_dict` checks; the
        batching adds its own keys (Buckets: "bucket_offsets")."""
        epoch, position, extra = self._cursor.saved(self._n)
        return {"seed": self.seed, "epoch": epoch, "position": position,
                "fingerprint": self.dataset.fingerprint, **extra}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly at `state` -- in O(1), with any world size: the positions
        [position, N) of that epoch are re-partitioned across the current ranks. A state
        saved at the end of an epoch continues with the next epoch."""
        where = f"Pipeline.load_state_dict on dataset {self.dataset.path}"
        seed, epoch, position = checked_state(
            state, where, (self.dataset.fingerprint, *self.dataset.earlier_fingerprints),
            self._sizes.count)
        n = self._sizes.count(seed, epoch)
        extra = self.batching.load_state(state, position, n, where)
        self._stop_run()
        self.seed = seed
        self._cursor.load(epoch, position, extra, n)

    def plan(self, start_position: int | None = None) -> Plan:
        """This rank's plan of the current epoch from `start_position` (default: now), made by
        the Pipeline's batching (a BatchPlan, DurationPlan or BucketPlan)."""
        cursor = self._cursor
        start = cursor.position if start_position is None else start_position
        state = cursor.batch_state if start_position is None else {}
        seed, epoch, sizes, assembly = self.seed, cursor.epoch, self._sizes, self._assembly
        context = PlanContext(
            dataset=self.dataset, n=self._n, seed=seed, epoch=epoch, rank=self.rank,
            world_size=self.world_size, batch_size=self.batch_size, drop_last=self.drop_last,
            shuffle=self.shuffle, augment=self.augment, start_position=start, state=state,
            params=assembly.params if assembly is not None else (),
            durations=lambda: sizes.durations(seed, epoch, assembly), sampler=sizes.sampler)
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
            if self._closed or self._assembly is None:
                raise RuntimeError("this Pipeline is closed; create a new one")
            owner = self._run_thread
            if (self._run is not None and owner is not None and owner is not
                    threading.current_thread() and owner.is_alive()):
                raise RuntimeError(
                    f"this Pipeline is already being iterated by thread {owner.name!r}; one "
                    "Pipeline feeds one loop at a time (create one Pipeline per thread)")
            abandoned = self._run is not None
            self._stop_run()
            self._cursor.begin_pass(abandoned, lambda e: self._sizes.count(self.seed, e))
            plan = self.plan()
            spare, self._spare_slots = self._spare_slots, None
            settings = RunSettings(
                self.dataset, self.device, self.batch_size, self.prefetch,
                leave_out=self.augment == "eval" and self.on_error == "skip",
                on_error=self.on_error, stages=self.stats.stages, describe=self._describe)
            run = Run(self._assembly, plan, settings, spare)
            self._run, self._run_thread = run, threading.current_thread()
        return run, plan

    def _iterate(self):
        run, plan = self._start()
        cursor, assembly = self._cursor, self._assembly
        try:
            for k, batch, replaced in run.batches(self.stats, lambda: self._closed):
                self._bad.note(replaced, self._describe)
                last = k + 1 == len(plan)  # the epoch ends with it (a dropped tail is done)
                cursor.delivered(last, self._n, *((0, {}) if last else (
                    plan.position_after(k + 1), plan.state_after(k + 1))))
                yield assembly.finish(batch, self.transform, self.copy)
            if len(plan) == 0:  # an empty plan (a resumed tail): the epoch is done
                cursor.position = self._n
        finally:
            run.close()
            if not self._closed and self._pid == os.getpid():
                self._spare_slots = run.spare_slots()
            if self._run is run:
                self._run = self._run_thread = None
                # a pass the parent started is not abandoned by a forked child: the child's
                # next pass continues where the parent's stood (as state_dict() says)
                cursor.abandoned = (cursor.position < self._n and not self._closed
                                    and self._pid == os.getpid())

    def _describe(self, sample_id: int) -> str:
        """Where sample `sample_id` is (its segment and recording when samples are segments)."""
        return describe_sample(self.dataset, self._unit, sample_id, self.seed,
                               self._cursor.epoch)

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
        if self._assembly is not None:
            assembly, self._assembly = self._assembly, None
            assembly.close()
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


def _check_source(source) -> None:
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


def _check_not_empty(plan: Plan, pipe: Pipeline) -> None:
    if pipe.drop_last and len(plan) == 0:
        n = pipe._n
        raise ValueError(
            f"batch_size={pipe.batch_size} on {pipe.world_size} rank(s) gives no full batch "
            f"of the {n} samples of {pipe.dataset.path} (train drops the incomplete tail); "
            f"use batch_size <= {max(1, n // pipe.world_size)} or drop_last=False")


def _order_of(order, round2: dict) -> Order:
    """The checked order= (round 3's shuffle=, taken out of `round2`, translated)."""
    if "shuffle" in round2:
        order = order_from_shuffle(round2.pop("shuffle"), order)
    return check_order("shuffle" if order is None else order)


def _check_arguments(augment, on_error, transform, seed, prefetch) -> int:
    """The Pipeline's scalar arguments checked; returns the seed as an int."""
    if augment not in ("train", "eval"):
        raise ValueError(f"augment must be 'train' or 'eval', got {augment!r}")
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    if transform is not None and not callable(transform):
        raise TypeError(f"transform must be callable(batch) -> batch, got {transform!r}")
    if int(prefetch) < 1:
        raise ValueError(f"need prefetch >= 1, got {prefetch}")
    try:  # an integer of any kind (numpy, a 0-d tensor); int("a") said "invalid literal"
        return operator.index(seed)
    except TypeError:
        raise TypeError(f"Pipeline seed must be an integer, got {seed!r}") from None


def _report_backends(assembly: Assembly, stats: PipelineStats):
    """Fill the stats' backend entries; returns the producer `pipe.backend` names (round 2)."""
    stats.field_backends.update(assembly.decisions)
    stats.threads, stats.threads_reason = assembly.threads, assembly.threads_reason
    if assembly.primary is None:
        return None
    producer, decision = assembly.primary
    stats.backend = decision["backend"]
    stats.backend_options = dict(decision["options"])
    stats.backend_reason = decision["reason"]
    return producer


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


use_pipeline(Pipeline)  # backend="auto" measures its candidates through Pipelines
