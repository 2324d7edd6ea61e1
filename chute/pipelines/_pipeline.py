"""Pipeline: what a training loop iterates -- batches of a dataset's fields as torch tensors:
decoded, augmented images, stored arrays (latents), scalar columns, metadata.

Batches are reused: the tensors of the batch returned by the k-th `next()` live in a
preallocated slot that stays valid until the (k+2)-th `next()` call begins (so the batch you
are training on and the previous one are both intact); after that the slot is refilled, so
`list(pipe)` would hold overwritten batches. Keep a batch longer with `.clone()`, or pass
`copy=True`. With a CUDA device, work queued on the current stream before the (k+2)-th `next()`
is waited for before the slot is overwritten.

Epochs and resume: see `set_epoch`, `state_dict` and `load_state_dict`. An epoch is finished
when its last batch is handed out; iterating again then starts the next epoch (so forgetting
`set_epoch` never repeats an order, and stopping after `len(pipe)` batches loses nothing).

The core here knows nothing of images: each requested field has a producer (chosen through
`pipelines/producers/_registry.py`) and the plan evaluates the per-sample parameters the
producers ask for (docs/design.md, "Plans and producers").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chute._fork import ProcessLock
from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute.errors import DecodeError, FormatError
from chute.pipelines._distributed import detect_rank_world, resolve_device
from chute.pipelines._field_resolve import resolve_field_backend
from chute.pipelines._options import (
    check_backend_options,
    check_ring_memory,
    dtype_name,
    image_size_of,
    mean_std_fractions,
    output_dtype,
    ring_memory_error,
)
from chute.pipelines._prefetch import Prefetcher
from chute.pipelines._resolve import resolve_backend
from chute.pipelines._staging import (
    allocate_slots,
    begin_fill,
    device_views,
    host_views,
    release,
    stage,
    wait_ready,
)
from chute.pipelines._substitute import Substitutor, failure_reason
from chute.pipelines.producers._contract import ImageSpec, Output, ProducerSpec
from chute.pipelines.producers._registry import (
    MEDIA_PRODUCERS,
    create_producer,
    delivered_by_default,
    field_backend,
    field_media,
    stored_producer,
)
from chute.pipelines.producers.image._crops import CropConfig
from chute.pipelines.sampling._duration_plan import DurationPlan
from chute.pipelines.sampling._merge import check_merge
from chute.pipelines.sampling._plan import BatchPlan
from chute.pipelines.sampling._units import ByRecording, sample_durations, sample_unit

__all__ = ["Pipeline", "PipelineStats", "IMAGENET_MEAN", "IMAGENET_STD"]

@dataclass
class PipelineStats:
    samples: int = 0  # samples handed to the training loop by this rank
    batches: int = 0
    decode_errors: int = 0  # samples that failed to decode and were replaced (on_error="skip")
    wait_seconds: float = 0.0  # time the training loop spent waiting for batches
    backend: str = ""  # the backend in use (what backend="auto" chose)
    backend_options: dict = field(default_factory=dict)
    backend_reason: str = ""  # why that backend: requested, stored decision, or measured
    threads: int = 0  # CPU decoder threads of this process (0: no CPU decoding)
    threads_reason: str = ""  # where that number comes from
    # field -> {"backend", "reason"} for fields whose options said backend="auto" (video)
    field_backends: dict = field(default_factory=dict)


class Pipeline:
    """Iterate batches of a chute dataset as dicts of torch tensors.

    Batches are reused: a yielded batch is overwritten two `next()` calls later. Keep it with
    `batch["image"].clone()` or pass `copy=True` (`list(pipe)` without it holds stale data).

    Each batch holds "index" (int64 global sample ids) and one entry per requested field:
    images decoded and augmented ([B,3,H,W] or [B,H,W,3]), ndarray fields as ``[B, *shape]``
    (ragged ones zero-padded, with "<field>_lengths"), scalar fields as [B] tensors, JSON and
    other bytes fields as lists. `len(pipe)` is this rank's batches per full epoch.

    Args:
        path_or_dataset: a dataset folder, URL or an open dataset (anything meeting
            `chute.readers.DatasetProtocol`).
        batch_size: samples per batch (per rank).
        image_size: output size of image fields: S (square), (H, W) or "HxW" (default 224, or
            the size of `crop`).
        augment: "train" (random resized crop + flip, drops the tail) or "eval" (center crop,
            every sample once).
        eval_crop: the eval crop: "torchvision" (default: Resize(round(S / 0.875)) shorter
            side, bilinear antialiased, then CenterCrop(S), as torchvision/timm validate) or
            "crop-resize" (a center box of whole pixels resized to S, FFCV's definition);
            None keeps `crop`'s (see `CropConfig`).
        backend: image decoder: "cpu", "dali", "dali-native" or "auto" (measured; see
            `chute autotune`). Ignored when no image field is requested.
        device: "cpu", "cuda" or "cuda:N" (default: the current CUDA device when there is one).
        seed: seeds the order and every random choice (a pure function of seed, epoch, sample).
        dtype: image dtype, "uint8", "float16", "bfloat16" (decoded as float32, cast on the
            device) or "float32" (torch dtypes work too).
        layout: "NCHW" or "NHWC" for images.
        mean, std: per-channel normalisation of float images: out = (pixel/255 - mean) / std.
            Fractions of 255 (0.485, ...) or, when any value is above 1, 0-255 units as FFCV and
            DALI take them (123.675, ...); both must use the same units.
        fields: fields to deliver; default: "image" (and "label" when present) for a dataset
            with an "image" field, else every field except JSON metadata.
        drop_last: drop the incomplete last batch (default: True in train, False in eval).
        rank, world_size: this process's DDP position (default: from torch.distributed / env).
        prefetch: batches prepared ahead of the training loop.
        on_error: "skip" replaces a failing sample deterministically; "raise" stops.
        backend_options: options of the image backend (e.g. {"threads": 4}); Python values.
            Yes/no options (dct_scaling, roi_decode) also take "true"/"false", "yes"/"no",
            "on"/"off" or "1"/"0"; any other string there raises.
        crop: a `CropConfig` for the train crops and flips (scale, ratio, flip_p, ...), e.g.
            `CropConfig(scale=(0.35, 1), flip_p=0.5)`; its size, when set, is the image size.
        transform: `callable(batch) -> batch` run on every batch on the output device, after
            the dtype cast (e.g. torchvision.transforms.v2 or kornia on GPU tensors).
        memory_format: `torch.channels_last` delivers NCHW images stored NHWC at no extra
            cost; `torch.contiguous_format` (default) is plain NCHW.
        copy: deliver batches the training loop owns (a copy each; slower) instead of views of
            the reused slots.
        field_options: options of other fields' producers, by field name (e.g.
            {"video": {"num_frames": 16, "frame_interval": 2, "size": (256, 256)}}; a video
            field also takes {"backend": "cpu"|"dali"|"auto"} (auto: measured by chute.Pipeline,
            see stats.field_backends); an
            ndarray or table field takes {"dtype": "bfloat16"|"float16"|"float32"|"float64"},
            a cast made on the device after the copy.
        buckets: variable-shape video batches, {resolution: {num_frames: (keep probability,
            batch size)}} (e.g. {"240p": {16: (1.0, 8)}}); every rank's step k comes from one
            bucket, and batch sizes come from the config (`batch_size` is then ignored; pass
            None). Needs exactly one video field; its frame_interval applies.
        unit: for audio datasets, what one sample is: "recording" (a whole file) or "segment"
            (one timestamped segment listed in the "meta" field's "segments"; the other
            fields are read from its recording). Default: one dataset row.
        max_duration: seconds of audio per batch (batch_size stays the most samples in one):
            batches of similar durations, the same count on every rank, tail dropped.
        merge: (min_s, max_s) with unit="segment": adjacent segments of a recording merged
            into samples of about that many seconds, drawn anew each epoch as a pure function
            of (seed, epoch); texts joined by spaces. The number of samples (and `len(pipe)`)
            then varies a little from epoch to epoch.
        lookups: table field -> per-sample index field: the table's row `index[i]` is
            delivered for sample i (e.g. {"clip_emb": "segment_to_video"}).
    """

    def __init__(self, path_or_dataset: str | Path | Any, batch_size: int | None, *,
                 image_size: int | tuple[int, int] | str | None = None, augment: str = "train",
                 backend: str = "auto", device: str | torch.device | None = None,
                 seed: int = 0, dtype: str | torch.dtype = "float16", layout: str = "NCHW",
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 fields: tuple[str, ...] | None = None, drop_last: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, prefetch: int = 2,
                 on_error: str = "skip", backend_options: dict | None = None,
                 field_options: dict[str, dict] | None = None, buckets: dict | None = None,
                 unit: str | None = None, max_duration: float | None = None,
                 crop: CropConfig | None = None, eval_crop: str | None = None,
                 transform: Callable[[dict], dict] | None = None,
                 memory_format: torch.memory_format = torch.contiguous_format,
                 copy: bool = False, lookups: dict[str, str] | None = None,
                 merge: tuple[float, float] | None = None):
        from chute.readers import open_dataset

        self._own_dataset = isinstance(path_or_dataset, (str, Path))
        self.dataset = (open_dataset(path_or_dataset) if self._own_dataset
                        else path_or_dataset)
        if augment not in ("train", "eval"):
            raise ValueError(f"augment must be 'train' or 'eval', got {augment!r}")
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError("memory_format must be torch.contiguous_format or "
                             f"torch.channels_last, got {memory_format!r}")
        if memory_format == torch.channels_last and layout != "NCHW":
            raise ValueError("memory_format=torch.channels_last applies to layout='NCHW'")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable(batch) -> batch, got {transform!r}")
        produced_dtype, self._cast = output_dtype(dtype)
        mean, std = mean_std_fractions(mean, std)
        backend_options = check_backend_options(backend_options)
        self.fields = self._check_fields(fields)
        self._field_options = {f: dict(o) for f, o in (field_options or {}).items()}
        self.buckets = self._bucket_table(buckets)
        if self.buckets is not None:
            batch_size = self.buckets.max_batch_size
        if batch_size is None or int(batch_size) < 1 or int(prefetch) < 1:
            raise ValueError(f"need batch_size >= 1 and prefetch >= 1, got {batch_size}, "
                             f"{prefetch}")
        self.batch_size = int(batch_size)
        self.crop = self._crop_config(crop, image_size, augment)
        if eval_crop is not None:
            self.crop = replace(self.crop, eval_crop=eval_crop)
        self.augment = augment
        self.seed = int(seed)
        self.drop_last = augment == "train" if drop_last is None else bool(drop_last)
        self.rank, self.world_size = detect_rank_world(rank, world_size)
        self.device = resolve_device(device)
        self.on_error = on_error
        self.prefetch = int(prefetch)
        self.transform = transform
        self.copy = bool(copy)
        self._channels_last = memory_format == torch.channels_last
        self.lookups = dict(lookups or {})
        if set(self.lookups) - set(self.fields):
            raise ValueError(f"lookups name fields {sorted(set(self.lookups) - set(self.fields))}"
                             f" that are not requested; add them to fields= ({self.fields})")
        unknown = sorted(set(self._field_options) - set(self.fields))
        if unknown:
            raise ValueError(f"field_options name fields {unknown} that are not requested "
                             f"(fields={list(self.fields)})")
        merge = check_merge(merge, unit)
        self._unit = None if unit is None else sample_unit(self.dataset, unit, merge=merge)
        if max_duration is not None and self.buckets is not None:
            raise ValueError("pass either buckets (video) or max_duration (audio), not both")
        if merge is not None and max_duration is not None and merge.max_s > max_duration:
            raise ValueError(f"merge max_s {merge.max_s} s exceeds max_duration={max_duration} "
                             "s: a merged sample could not fit a batch; lower merge's max_s")
        self.max_duration = max_duration
        self._durations: dict = {}  # (seed, epoch) -> seconds of every sample (max_duration)
        self._epoch, self._position, self._params = 0, 0, ()
        self._bucket_offsets: tuple = ()  # buckets: samples of each delivered this epoch
        self._check_not_empty()
        images = [f for f in self.fields if field_media(f, self.dataset.specs[f]) == "image"]
        name, options, reason = "", {}, "no image field requested: nothing to decode"
        if images:
            name, options, reason = resolve_backend(
                backend, device=self.device, dataset=self.dataset, batch_size=self.batch_size,
                image_size=self.crop.size, dtype=dtype_name(dtype), augment=augment,
                backend_options=backend_options)
        image_config = dict(size=self.crop.size, dtype=produced_dtype,
                            layout="NHWC" if self._channels_last else layout,
                            mean=mean, std=std, crop=self.crop)
        self._producers = []
        self._field_backends: dict[str, dict] = {}  # fields whose backend "auto" chose
        try:
            for f in self.fields:
                producer = create_producer(
                    self._producer_spec(f, f in images, name, options, image_config))
                # segments: the plan's ids are segment ids; fields are read from the recording
                self._producers.append(ByRecording(producer) if unit == "segment" else producer)
        except BaseException:
            self._close_producers()
            raise
        self.backend = next((p for p in self._producers if p.field in images), None)
        self._images = tuple(images)
        self._outputs: dict[str, Output] = {}
        for producer in self._producers:
            outputs = producer.outputs()
            clash = sorted(set(outputs) & set(self._outputs))
            if clash:  # e.g. a stored field named like another field's extra output ("ar")
                self._close_producers()
                raise ValueError(f"fields {self.fields} give the output key(s) {clash} twice "
                                 "(a field named like another field's extra output); leave "
                                 "one of them out of fields=")
            self._outputs.update(outputs)
        check_ring_memory(self.prefetch + 2, self.batch_size, self._outputs, self.dataset.path)
        units = () if self._unit is None else (self._unit,)
        self._params = _unique([*units, *(s for p in self._producers for s in p.param_sources())])
        self._durations.clear()  # made before the producers existed (the empty-epoch check)
        if max_duration is not None:
            try:
                self.plan(0)  # a sample longer than max_duration as delivered raises now
            except BaseException:
                self._close_producers()
                raise
        threads = getattr(self.backend, "threads", None) or 0
        self.stats = PipelineStats(backend=name, backend_options=options, backend_reason=reason,
                                   threads=threads,
                                   threads_reason=getattr(self.backend, "threads_reason", ""),
                                   field_backends=self._field_backends)
        self._resume_pending = False
        self._warned = False
        self._run = None
        self._run_thread = None
        self._lock = ProcessLock()  # free again in a forked child
        self._pid = os.getpid()
        self._closed = False

    @property
    def _n(self) -> int:
        """Samples of the current epoch."""
        return self._count(self.seed, self._epoch)

    def _count(self, seed: int, epoch: int) -> int:
        """Samples of epoch `epoch` (merged segments: a pure function of seed and epoch)."""
        return len(self.dataset) if self._unit is None else self._unit.count(seed, epoch)

    def _durations_of(self, seed: int, epoch: int) -> np.ndarray:
        """Seconds every sample of the epoch delivers (what max_duration packs): a producer's
        `seconds` when it has one (audio: after speed perturbation and resampling), else
        the stored durations."""
        key = (seed, epoch)
        if key not in self._durations:
            self._durations.clear()  # one epoch at a time
            timed = [p for p in getattr(self, "_producers", None) or ()
                     if getattr(p, "seconds", None) is not None]
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

    @staticmethod
    def _crop_config(crop: CropConfig | None, image_size, augment: str) -> CropConfig:
        if crop is None:
            return CropConfig(image_size_of(224 if image_size is None else image_size),
                              mode=augment)
        if not isinstance(crop, CropConfig):
            raise TypeError(f"crop must be a chute.CropConfig, got {type(crop).__name__}")
        size = crop.size
        if image_size is not None:
            size = image_size_of(image_size)
            if crop.size is not None and crop.size != size:
                raise ValueError(f"crop.size {crop.size} and image_size {size} disagree; "
                                 "give the size once")
        return replace(crop, size=(224, 224) if size is None else size, mode=augment)

    def _check_not_empty(self) -> None:
        n = self._n
        if n == 0:
            raise ValueError(f"dataset {self.dataset.path} holds no samples; check how it was "
                             "converted (`chute info`, and skipped.tsv next to it)")
        if self.drop_last and len(self.plan(0)) == 0:
            raise ValueError(
                f"batch_size={self.batch_size} on {self.world_size} rank(s) gives no full batch "
                f"of the {n} samples of {self.dataset.path} (train drops the incomplete tail); "
                f"use batch_size <= {max(1, n // self.world_size)} or drop_last=False")

    def _producer_spec(self, f: str, image: bool, backend: str, options: dict,
                       image_config: dict) -> ProducerSpec:
        common = dict(field=f, dataset=self.dataset, batch_size=self.batch_size,
                      device=str(self.device), prefetch=self.prefetch, augment=self.augment,
                      unit=self._unit)
        if image:
            self._check_image_columns(f)
            return ImageSpec(name=backend, options=dict(options), **common, **image_config)
        if f in self.lookups:
            return ProducerSpec(name="lookup", options={**self._field_options.get(f, {}),
                                                         "index": self.lookups[f]}, **common)
        producer = stored_producer(f, self.dataset.specs[f])

        def auto(rest: dict) -> str:
            backend, reason = resolve_field_backend(
                producer, dataset=self.dataset, field=f, options=rest, device=str(self.device),
                batch_size=self.batch_size, augment=self.augment)
            self._field_backends[f] = {"backend": backend, "reason": reason}
            return backend

        name, options = field_backend(producer, dict(self._field_options.get(f, {})), auto)
        return ProducerSpec(name=name, options=options, **common)

    def _check_image_columns(self, f: str) -> None:
        missing = [c for c in ("height", "width") if c not in self.dataset.fields]
        if missing:  # the dataset is incomplete, not the call: a FormatError (a ValueError)
            raise FormatError(f"field {f!r} of {self.dataset.path} holds images but the dataset "
                             f"has no {missing} column(s), which crops are computed from; "
                             "convert it with `chute convert` (which stores them)")

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
        self._bucket_offsets = ()

    def state_dict(self) -> dict:
        """{seed, epoch, position, fingerprint}: position = samples of this epoch handed to the
        training loop by all ranks together (batches delivered on this rank x batch size x world
        size). Once an epoch's last batch is handed out the state is the next epoch's start
        (epoch + 1, position 0), so resuming never replays an empty epoch. Prefetched batches
        are not counted. Ranks run in lockstep under DDP, so any rank's state is the job's
        state. `fingerprint` names the dataset, which `load_state_dict` checks."""
        epoch, position, offsets = self._epoch, self._position, self._bucket_offsets
        if position >= self._n:
            epoch, position, offsets = epoch + 1, 0, ()
        state = {"seed": self.seed, "epoch": epoch, "position": position,
                 "fingerprint": self.dataset.fingerprint}
        if self.buckets is not None:  # what each bucket delivered: resume with any world size
            state["bucket_offsets"] = list(offsets)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly at `state` -- in O(1), with any world size: the positions
        [position, N) of that epoch are re-partitioned across the current ranks. A state
        saved at the end of an epoch continues with the next epoch."""
        seed, epoch, position = self._checked_state(state)
        from chute.pipelines.sampling._bucket_plan import state_offsets

        n = self._count(seed, epoch)
        offsets = state_offsets(state, position, n, self.buckets,
                                f"Pipeline.load_state_dict on dataset {self.dataset.path}")
        self._stop_run()
        if position >= n:
            epoch, position, offsets = epoch + 1, 0, ()
        self.seed, self._epoch, self._position = seed, epoch, position
        self._bucket_offsets = offsets
        self._resume_pending = True

    def _checked_state(self, state) -> tuple[int, int, int]:
        where = f"Pipeline.load_state_dict on dataset {self.dataset.path}"
        if not isinstance(state, dict) or not {"seed", "epoch", "position"} <= set(state):
            raise ValueError(f"{where}: expected the dict of Pipeline.state_dict() (seed, "
                             f"epoch, position), got {state!r:.200}")
        fingerprint = state.get("fingerprint")  # states saved before it was stored lack it
        if fingerprint is not None and fingerprint != self.dataset.fingerprint:
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

    def _bucket_table(self, buckets):
        if buckets is None:
            return None
        from chute.pipelines.sampling._buckets import parse_buckets

        videos = [f for f in self.fields
                  if MEDIA_PRODUCERS.get(field_media(f, self.dataset.specs[f])) == "video"]
        if len(videos) != 1:
            raise ValueError(f"buckets need exactly one video field among fields={self.fields} "
                             f"(found {videos})")
        options = self._field_options.setdefault(videos[0], {})
        table = parse_buckets(buckets, int(options.get("frame_interval", 1)))
        options["buckets"] = table
        return table

    def plan(self, start_position: int | None = None):
        """This rank's plan of the current epoch from `start_position` (default: now): a
        BatchPlan, a BucketPlan when the Pipeline has buckets, a DurationPlan with
        max_duration."""
        from chute.readers import DatasetRef

        start = self._position if start_position is None else start_position
        offsets = self._bucket_offsets if start_position is None else ()
        if self.buckets is not None:
            from chute.pipelines.sampling._bucket_plan import BucketPlan

            ds = self.dataset
            return BucketPlan(
                DatasetRef.of(ds), len(ds), self.seed, self._epoch, self.rank, self.world_size,
                self.drop_last, start, self.buckets, self.augment,
                np.asarray(ds.column("height")), np.asarray(ds.column("width")),
                np.asarray(ds.column("num_frames")), self._params, offsets)
        if self.max_duration is not None:
            return DurationPlan(
                dataset=DatasetRef.of(self.dataset), n=self._n, seed=self.seed,
                epoch=self._epoch, rank=self.rank, world_size=self.world_size,
                batch_size=self.batch_size, drop_last=True, start_position=start,
                params=self._params, max_duration=float(self.max_duration),
                durations=self._durations_of(self.seed, self._epoch))
        return BatchPlan(
            dataset=DatasetRef.of(self.dataset), n=self._n, seed=self.seed,
            epoch=self._epoch, rank=self.rank, world_size=self.world_size,
            batch_size=self.batch_size, drop_last=self.drop_last, start_position=start,
            params=self._params,
        )

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

    def _start(self) -> tuple[_Run, BatchPlan]:
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
            self._stop_run()
            if self._position >= self._n:
                self._epoch, self._position = self._epoch + 1, 0  # previous epoch finished
                self._bucket_offsets = ()
            self._resume_pending = False
            plan = self.plan()
            run = _Run(self, plan)
            self._run, self._run_thread = run, threading.current_thread()
        return run, plan

    def _iterate(self):
        run, plan = self._start()
        held = []  # slots of the batches yielded last and before last: still valid
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
                self.stats.wait_seconds += time.perf_counter() - t0
                held.append(slot)
                wait_ready(slot)
                self._note_replaced(replaced)
                batch = device_views(slot, shapes)
                batch.update(lists)
                n = shapes["index"][0]
                # the epoch ends with its last batch (a dropped tail counts as done)
                last = k + 1 == len(plan)
                self._position = self._n if last else plan.position_after(k + 1)
                if self.buckets is not None and not last:
                    self._bucket_offsets = plan.offsets_after(k + 1)
                self.stats.samples += n
                self.stats.batches += 1
                yield self._finish(batch)
            self._position = self._n
        finally:
            run.close()
            if self._run is run:
                self._run = self._run_thread = None

    def _finish(self, batch: dict) -> dict:
        """Output options applied on the device: dtype cast, memory format, transform, copy."""
        for key in self._images:
            image = batch[key]
            if self._channels_last:
                image = image.permute(0, 3, 1, 2)  # NHWC storage seen as NCHW = channels_last
            if self._cast is not None:
                image = image.to(self._cast, memory_format=torch.preserve_format)
            batch[key] = image
        for key, output in self._outputs.items():
            if output.cast is not None:
                batch[key] = batch[key].to(output.cast)
        if self.transform is not None:
            batch = self.transform(batch)
        if self.copy:
            batch = {k: v.clone() if isinstance(v, torch.Tensor) else list(v)
                     for k, v in batch.items()}
        return batch

    def _note_replaced(self, replaced: list) -> None:
        if not replaced:
            return
        self.stats.decode_errors += len(replaced)
        if not self._warned:
            self._warned = True
            bad, sub, reason = replaced[0]
            why = f" ({reason})" if reason else ""
            warnings.warn(
                f"chute: sample {bad} ({self._describe(bad)}) of {self.dataset.path} "
                f"could not be decoded{why}; replaced by sample {sub}. Further failures are "
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
        if self._producers is not None:
            producers, self._producers = self._producers, None
            for producer in producers:
                producer.close()
            self.backend = None
            if self._own_dataset:
                closer = getattr(self.dataset, "close", None)
                if closer is not None:
                    closer()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def _check_fields(self, fields) -> tuple[str, ...]:
        kinds = self.dataset.fields
        if fields is None:  # images + labels for image datasets, else all but metadata
            fields = tuple(f for f in ("image", "label") if f in kinds) if "image" in kinds \
                else tuple(f for f, spec in self.dataset.specs.items()
                           if delivered_by_default(f, spec))
        fields = tuple(fields)
        missing = [f for f in fields if f not in kinds]
        if missing:
            raise ValueError(f"fields {missing} are not in dataset {self.dataset.path}; "
                             f"it has {sorted(kinds)}")
        if not fields:
            raise ValueError(f"no fields requested from {self.dataset.path}; name some of "
                             f"{sorted(kinds)} in fields=")
        if len(set(fields)) != len(fields) or "index" in fields:
            raise ValueError(f"fields {list(fields)} repeat a name or use 'index' (always "
                             "delivered)")
        return fields

    def _close_producers(self) -> None:
        for producer in self._producers or ():
            producer.close()

def _unique(items) -> tuple:
    """Distinct parameter sources in first-seen order (two image fields share their crops)."""
    found: list = []
    for item in items:
        if item not in found:
            found.append(item)
    return tuple(found)


class _Run:
    """One pass over a plan: slots, every producer's epoch reader and the prefetch thread."""

    def __init__(self, pipe: Pipeline, plan: BatchPlan):
        self.outputs = pipe._outputs
        self.producers = pipe._producers
        b = pipe.batch_size
        arrays = {k: ((b, *o.sample_shape), o.dtype) for k, o in self.outputs.items()
                  if o.dtype is not None}
        arrays["index"] = ((b,), np.dtype(np.int64))
        on_device = tuple(k for k, o in self.outputs.items() if o.on_device)
        try:
            slots = allocate_slots(pipe.prefetch + 2, arrays, pipe.device,
                                   device_only=on_device)
        except (MemoryError, torch.OutOfMemoryError) as exc:
            raise ring_memory_error(pipe.prefetch + 2, b, self.outputs, pipe.dataset.path,
                                    f"which could not be allocated ({exc})") from None
        self.stream = torch.cuda.Stream(pipe.device) if pipe.device.type == "cuda" else None
        self.plan = plan
        self.readers = []
        try:
            for producer in self.producers:
                self.readers.append(producer.open_epoch(plan, 0))
        except BaseException:
            self._close_readers()
            raise
        self.substitutor = Substitutor(pipe.dataset, plan, self.producers, self.outputs,
                                       pipe.on_error, describe=pipe._describe)
        self.images = frozenset(pipe._images)
        self.prefetcher = Prefetcher(slots, self.fill, range(len(plan)))

    def fill(self, slot, iteration: int):
        request = self.plan.request(iteration)
        stream_ctx = torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()
        with stream_ctx:
            begin_fill(slot, self.stream)
            request, shapes, host, out = self._views(slot, request)
            failed = np.zeros(len(request.ids), dtype=bool)
            reasons = {}  # row -> why it failed first (for on_error="raise")
            for producer, reader in zip(self.producers, self.readers, strict=True):
                status = reader.read(request, {k: out[k] for k in producer.outputs()})
                status = np.asarray(status).reshape(len(request.ids))
                for row in np.flatnonzero((status != 0) & ~failed).tolist():
                    reasons[row] = failure_reason(producer.field, int(status[row]),
                                                  producer.field in self.images)
                failed |= status != 0
            ids, replaced, reread = self.substitutor.fix(request.ids, failed, out, shapes,
                                                         request, reasons=reasons)
            if reread:  # a substitute is larger than this batch's shapes: read it again
                request, shapes, host, out = self._reread(slot, ids, request)
            host["index"][...] = ids
            stage(slot, shapes, self.stream)
        lists = {k: out[k] for k, o in self.outputs.items() if o.dtype is None}
        return shapes, lists, replaced

    def _views(self, slot, request):
        """The request with this batch's shapes, and the slot viewed in them."""
        n = len(request.ids)
        shapes = {"index": (n,)}
        for producer in self.producers:
            shapes.update(producer.shapes(request))
        request = replace(request, shapes=shapes)
        host = host_views(slot, shapes)
        device = device_views(slot, shapes) if self.stream else host
        out = {k: [None] * n if o.dtype is None else (device[k] if o.on_device else host[k])
               for k, o in self.outputs.items()}
        return request, shapes, host, out

    def _reread(self, slot, ids, failed_request):
        substituted = self.plan.request_for(ids, like=failed_request)
        substituted = replace(substituted, iteration=failed_request.iteration)
        request, shapes, host, out = self._views(slot, substituted)
        for producer in self.producers:
            status = producer.fill(request, {k: out[k] for k in producer.outputs()})
            if np.asarray(status).any():
                raise DecodeError(f"batch {request.iteration} of {self.plan.dataset}: a sample "
                                  "that read correctly failed when read again with its "
                                  "substitutes; run `chute verify` on the dataset")
        return request, shapes, host, out

    def get(self):
        return self.prefetcher.get()

    def release(self, slot) -> None:
        release(slot)
        self.prefetcher.release(slot)

    def _close_readers(self) -> None:
        for reader in self.readers:
            reader.close()

    def close(self) -> None:
        self.prefetcher.close()
        if self.stream is not None:  # kernels/copies may still write the slots being released
            self.stream.synchronize()
        self._close_readers()
        # An unfinished loop's generator keeps this run alive: drop what holds the dataset's
        # maps, so Pipeline.close() releases them at once (not at garbage collection).
        self.readers, self.producers, self.substitutor = [], (), None
