"""Pipeline: what a training loop iterates -- batches of a dataset's fields as torch tensors:
decoded, augmented images, stored arrays (latents), scalar columns, metadata.

Lifetime of a yielded batch: the tensors of the batch returned by the k-th `next()` live in a
preallocated slot that stays valid until the (k+2)-th `next()` call begins (so the batch you
are training on and the previous one are both intact); after that the slot is refilled. Keep
a batch longer with `.clone()`. With a CUDA device, work queued on the current stream before the
(k+2)-th `next()` is waited for before the slot is overwritten.

Epochs and resume: see `set_epoch`, `state_dict` and `load_state_dict`. Iterating again after an
epoch ended starts the next epoch (so forgetting `set_epoch` never repeats an order).

The core here knows nothing of images: each requested field has a producer (chosen through
`_producers.py`) and the plan evaluates the per-sample parameters the producers ask for
(docs/design.md, "Plans and producers").
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute.pipelines._crops import CropConfig
from chute.pipelines._distributed import detect_rank_world, resolve_device
from chute.pipelines._plan import BatchPlan
from chute.pipelines._prefetch import Prefetcher
from chute.pipelines._producer import ImageSpec, Output, ProducerSpec
from chute.pipelines._producers import (
    KIND_PRODUCERS,
    MEDIA_PRODUCERS,
    create_producer,
    field_media,
)
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
from chute.pipelines._substitute import Substitutor

__all__ = ["Pipeline", "PipelineStats", "IMAGENET_MEAN", "IMAGENET_STD"]

_DTYPES = {"uint8": "uint8", "float16": "float16", "float32": "float32",
           torch.uint8: "uint8", torch.float16: "float16", torch.float32: "float32"}


@dataclass
class PipelineStats:
    samples: int = 0  # samples handed to the training loop by this rank
    batches: int = 0
    decode_errors: int = 0  # samples that failed to decode and were replaced (on_error="skip")
    wait_seconds: float = 0.0  # time the training loop spent waiting for batches
    backend: str = ""  # the backend in use (what backend="auto" chose)
    backend_options: dict = field(default_factory=dict)
    backend_reason: str = ""  # why that backend: requested, stored decision, or measured


class Pipeline:
    """Iterate batches of a chute dataset as dicts of torch tensors.

    Each batch holds "index" (int64 global sample ids) and one entry per requested field:
    images decoded and augmented ([B,3,H,W] or [B,H,W,3]), ndarray fields as [B, *shape]
    (ragged ones zero-padded, with "<field>_lengths"), scalar fields as [B] tensors, JSON and
    other bytes fields as lists. `len(pipe)` is this rank's batches per full epoch.

    Args:
        path_or_dataset: a dataset folder, URL or an open `chute.readers.Dataset`.
        batch_size: samples per batch (per rank).
        image_size: output (H, W) of image fields, or one int for squares.
        augment: "train" (random resized crop + flip, drops the tail) or "eval" (center crop,
            every sample once).
        backend: image decoder: "cpu", "dali", "dali-native" or "auto" (measured; see
            `chute autotune`). Ignored when no image field is requested.
        device: "cpu", "cuda" or "cuda:N" (default: the current CUDA device when there is one).
        seed: seeds the order and every random choice (a pure function of seed, epoch, sample).
        dtype: image dtype, "uint8", "float16" or "float32" (torch dtypes work too).
        layout: "NCHW" or "NHWC" for images.
        mean, std: per-channel normalisation of float images, as fractions of 255.
        fields: fields to deliver; default: "image" (and "label" when present) for a dataset
            with an "image" field, else every field except JSON metadata.
        drop_last: drop the incomplete last batch (default: True in train, False in eval).
        rank, world_size: this process's DDP position (default: from torch.distributed / env).
        prefetch: batches prepared ahead of the training loop.
        on_error: "skip" replaces a failing sample deterministically; "raise" stops.
        backend_options: options of the image backend (e.g. {"threads": 4}).
        field_options: options of other fields' producers, by field name (e.g.
            {"video": {"num_frames": 16, "frame_interval": 2, "size": (256, 256)}}).
        buckets: variable-shape video batches, {resolution: {num_frames: (keep probability,
            batch size)}} (e.g. {"240p": {16: (1.0, 8)}}); every rank's step k comes from one
            bucket, and batch sizes come from the config (`batch_size` is then ignored; pass
            None). Needs exactly one video field; its frame_interval applies.
    """

    def __init__(self, path_or_dataset, batch_size: int | None, *,
                 image_size: int | tuple[int, int] = 224, augment: str = "train",
                 backend: str = "auto", device=None, seed: int = 0,
                 dtype="float16", layout: str = "NCHW", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                 fields: tuple[str, ...] | None = None, drop_last: bool | None = None,
                 rank: int | None = None, world_size: int | None = None, prefetch: int = 2,
                 on_error: str = "skip", backend_options: dict | None = None,
                 field_options: dict[str, dict] | None = None, buckets: dict | None = None):
        from chute.readers import open_dataset

        self.dataset = (open_dataset(path_or_dataset)
                        if isinstance(path_or_dataset, (str, Path)) else path_or_dataset)
        if augment not in ("train", "eval"):
            raise ValueError(f"augment must be 'train' or 'eval', got {augment!r}")
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be uint8, float16 or float32, got {dtype!r}")
        self.fields = self._check_fields(fields)
        self._field_options = {f: dict(o) for f, o in (field_options or {}).items()}
        self.buckets = self._bucket_table(buckets)
        if self.buckets is not None:
            batch_size = self.buckets.max_batch_size
        if batch_size is None or int(batch_size) < 1 or int(prefetch) < 1:
            raise ValueError(f"need batch_size >= 1 and prefetch >= 1, got {batch_size}, "
                             f"{prefetch}")
        self.batch_size = int(batch_size)
        self.crop = CropConfig(image_size, mode=augment)
        self.augment = augment
        self.seed = int(seed)
        self.drop_last = augment == "train" if drop_last is None else bool(drop_last)
        self.rank, self.world_size = detect_rank_world(rank, world_size)
        self.device = resolve_device(device)
        self.on_error = on_error
        self.prefetch = int(prefetch)
        unknown = sorted(set(self._field_options) - set(self.fields))
        if unknown:
            raise ValueError(f"field_options name fields {unknown} that are not requested "
                             f"(fields={list(self.fields)})")
        images = [f for f in self.fields if field_media(f, self.dataset.specs[f]) == "image"]
        name, options, reason = "", {}, "no image field requested: nothing to decode"
        if images:
            name, options, reason = resolve_backend(
                backend, device=self.device, dataset=self.dataset, batch_size=self.batch_size,
                image_size=self.crop.size, dtype=_DTYPES[dtype], augment=augment,
                backend_options=backend_options)
        image_config = dict(size=self.crop.size, dtype=_DTYPES[dtype], layout=layout,
                            mean=tuple(mean), std=tuple(std), crop=self.crop)
        self._producers = []
        try:
            for f in self.fields:
                self._producers.append(create_producer(
                    self._producer_spec(f, f in images, name, options, image_config)))
        except BaseException:
            self._close_producers()
            raise
        self.backend = next((p for p in self._producers if p.field in images), None)
        self._outputs: dict[str, Output] = {}
        for producer in self._producers:
            self._outputs.update(producer.outputs())
        self._params = _unique(s for p in self._producers for s in p.param_sources())
        self.stats = PipelineStats(backend=name, backend_options=options, backend_reason=reason)
        self._epoch = 0
        self._position = 0
        self._resume_pending = False
        self._warned = False
        self._run = None
        self._closed = False

    def _producer_spec(self, f: str, image: bool, backend: str, options: dict,
                       image_config: dict) -> ProducerSpec:
        common = dict(field=f, dataset=self.dataset, batch_size=self.batch_size,
                      device=str(self.device), prefetch=self.prefetch, augment=self.augment)
        if image:
            self._check_image_columns(f)
            return ImageSpec(name=backend, options=dict(options), **common, **image_config)
        media = field_media(f, self.dataset.specs[f])
        name = MEDIA_PRODUCERS.get(media) or KIND_PRODUCERS[self.dataset.fields[f]]
        return ProducerSpec(name=name, options=dict(self._field_options.get(f, {})), **common)

    def _check_image_columns(self, f: str) -> None:
        missing = [c for c in ("height", "width") if c not in self.dataset.fields]
        if missing:
            raise ValueError(f"field {f!r} of {self.dataset.path} holds images but the dataset "
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

    def state_dict(self) -> dict:
        """{seed, epoch, position}: position = samples of this epoch handed to the training loop
        by all ranks together (batches delivered on this rank x batch size x world size), or N
        once the epoch ended. Prefetched batches are not counted. Ranks run in lockstep under
        DDP, so any rank's state is the job's state."""
        return {"seed": self.seed, "epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly at `state` -- in O(1), with any world size: the positions
        [position, N) of that epoch are re-partitioned across the current ranks."""
        position = int(state["position"])
        if not 0 <= position <= len(self.dataset):
            raise ValueError(f"state position {position} is outside [0, {len(self.dataset)}] "
                             f"for dataset {self.dataset.path}; was it saved for another dataset?")
        self._stop_run()
        self.seed, self._epoch, self._position = int(state["seed"]), int(state["epoch"]), position
        self._resume_pending = True

    def _bucket_table(self, buckets):
        if buckets is None:
            return None
        from chute.pipelines._buckets import parse_buckets

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
        BatchPlan, or a BucketPlan when the Pipeline has buckets."""
        from chute.readers import DatasetRef

        start = self._position if start_position is None else start_position
        if self.buckets is not None:
            from chute.pipelines._bucket_plan import BucketPlan

            ds = self.dataset
            return BucketPlan(
                DatasetRef.of(ds), len(ds), self.seed, self._epoch, self.rank, self.world_size,
                self.drop_last, start, self.buckets, self.augment,
                np.asarray(ds.column("height")), np.asarray(ds.column("width")),
                np.asarray(ds.column("num_frames")), self._params)
        return BatchPlan(
            dataset=DatasetRef.of(self.dataset), n=len(self.dataset), seed=self.seed,
            epoch=self._epoch, rank=self.rank, world_size=self.world_size,
            batch_size=self.batch_size, drop_last=self.drop_last,
            start_position=self._position if start_position is None else start_position,
            params=self._params,
        )

    def __len__(self) -> int:
        return len(self.plan(0))

    # ---- iteration -------------------------------------------------------------------------

    def __iter__(self):
        if self._closed:
            raise RuntimeError("this Pipeline is closed; create a new one")
        self._stop_run()
        if self._position >= len(self.dataset) and not self._resume_pending:
            self._epoch, self._position = self._epoch + 1, 0  # previous epoch finished
        self._resume_pending = False
        plan = self.plan()
        run = _Run(self, plan)
        self._run = run
        return self._iterate(run, plan)

    def _iterate(self, run: _Run, plan: BatchPlan):
        held = []  # slots of the batches yielded last and before last: still valid
        try:
            for k in range(len(plan)):
                while len(held) > 1:
                    run.release(held.pop(0))  # the batch before the previous one expires now
                t0 = time.perf_counter()
                slot, (shapes, lists, replaced) = run.get()
                self.stats.wait_seconds += time.perf_counter() - t0
                held.append(slot)
                wait_ready(slot)
                self._note_replaced(replaced)
                batch = device_views(slot, shapes)
                batch.update(lists)
                n = shapes["index"][0]
                self._position = plan.position_after(k + 1)
                self.stats.samples += n
                self.stats.batches += 1
                yield batch
            self._position = len(self.dataset)  # epoch over (a dropped tail counts as done)
        finally:
            run.close()
            if self._run is run:
                self._run = None

    def _note_replaced(self, replaced: list) -> None:
        if not replaced:
            return
        self.stats.decode_errors += len(replaced)
        if not self._warned:
            self._warned = True
            bad, sub = replaced[0]
            shard, local = self.dataset.locate(bad)
            warnings.warn(
                f"chute: sample {bad} (shard {shard}, local index {local}) of {self.dataset.path} "
                f"could not be decoded; replaced by sample {sub}. Further failures are counted "
                "in pipe.stats.decode_errors without warning; run `chute verify` on the dataset.",
                RuntimeWarning, stacklevel=3,
            )

    # ---- lifetime --------------------------------------------------------------------------

    def _stop_run(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None

    def close(self) -> None:
        """Stop the prefetch thread and free the slots; the pipeline cannot be iterated again."""
        self._stop_run()
        if not self._closed:
            self._closed = True
            self._close_producers()

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
                           if KIND_PRODUCERS.get(spec["kind"]) != "json")
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
        for producer in self._producers:
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
        slots = allocate_slots(pipe.prefetch + 2, arrays, pipe.device, device_only=on_device)
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
                                       pipe.on_error)
        self.prefetcher = Prefetcher(slots, self.fill, range(len(plan)))

    def fill(self, slot, iteration: int):
        request = self.plan.request(iteration)
        n = len(request.ids)
        shapes = {"index": (n,)}
        for producer in self.producers:
            shapes.update(producer.shapes(request))
        request = replace(request, shapes=shapes)
        stream_ctx = torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()
        with stream_ctx:
            begin_fill(slot, self.stream)
            host = host_views(slot, shapes)
            device = device_views(slot, shapes) if self.stream else host
            out = {k: [None] * n if o.dtype is None else (device[k] if o.on_device else host[k])
                   for k, o in self.outputs.items()}
            failed = np.zeros(n, dtype=bool)
            for producer, reader in zip(self.producers, self.readers, strict=True):
                status = reader.read(request, {k: out[k] for k in producer.outputs()})
                failed |= np.asarray(status).reshape(n) != 0
            ids, replaced = self.substitutor.fix(request.ids, failed, out, shapes, request)
            host["index"][...] = ids
            stage(slot, shapes, self.stream)
        lists = {k: out[k] for k, o in self.outputs.items() if o.dtype is None}
        return shapes, lists, replaced

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
