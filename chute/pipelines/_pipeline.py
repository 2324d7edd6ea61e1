"""Pipeline: what a training loop iterates -- batches of decoded, augmented images as tensors.

Lifetime of a yielded batch: the tensors of the batch returned by the k-th `next()` live in a
preallocated slot that stays valid until the (k+2)-th `next()` call begins (so the batch you
are training on and the previous one are both intact); after that the slot is refilled. Keep
a batch longer with `.clone()`. With a CUDA device, work queued on the current stream before the
(k+2)-th `next()` is waited for before the slot is overwritten.

Epochs and resume: see `set_epoch`, `state_dict` and `load_state_dict`. Iterating again after an
epoch ended starts the next epoch (so forgetting `set_epoch` never repeats an order).
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
from chute.pipelines._backend import BackendSpec, create_backend
from chute.pipelines._crops import CropConfig
from chute.pipelines._distributed import detect_rank_world, resolve_device
from chute.pipelines._plan import BatchPlan
from chute.pipelines._prefetch import Prefetcher
from chute.pipelines._resolve import resolve_backend
from chute.pipelines._staging import allocate_slots, begin_fill, release, stage, wait_ready
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
    """Iterate decoded, augmented batches of a chute dataset as dicts of torch tensors.

    Each batch holds "image" ([B,3,H,W] or [B,H,W,3]), "index" (global sample ids), the requested
    scalar fields as tensors and JSON fields as lists. `len(pipe)` is this rank's batches per
    full epoch.
    """

    def __init__(self, path_or_dataset, batch_size: int, *, image_size=224, augment="train",
                 backend="auto", device=None, seed=0, dtype="float16", layout="NCHW",
                 mean=IMAGENET_MEAN, std=IMAGENET_STD, fields=("image", "label"),
                 drop_last=None, rank=None, world_size=None, prefetch=2, on_error="skip",
                 backend_options=None):
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
        if int(batch_size) < 1 or int(prefetch) < 1:
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
        self.fields = self._check_fields(tuple(fields))
        dtype_name = _DTYPES[dtype]
        name, options, reason = resolve_backend(
            backend, device=self.device, dataset=self.dataset, batch_size=self.batch_size,
            image_size=self.crop.size, dtype=dtype_name, augment=augment,
            backend_options=backend_options)
        self._spec = BackendSpec(
            name=name, dataset=self.dataset, batch_size=self.batch_size, size=self.crop.size,
            dtype=dtype_name, layout=layout, mean=tuple(mean), std=tuple(std),
            device=str(self.device), prefetch=int(prefetch), options=options,
        )
        self.backend = create_backend(self._spec)
        self._substitute_decoder = None
        self.stats = PipelineStats(backend=name, backend_options=options, backend_reason=reason)
        self._epoch = 0
        self._position = 0
        self._resume_pending = False
        self._warned = False
        self._run = None
        self._closed = False

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

    def plan(self, start_position: int | None = None) -> BatchPlan:
        """This rank's BatchPlan of the current epoch from `start_position` (default: now)."""
        return BatchPlan(
            dataset_path=str(self.dataset.path), n=len(self.dataset), seed=self.seed,
            epoch=self._epoch, rank=self.rank, world_size=self.world_size,
            batch_size=self.batch_size, drop_last=self.drop_last,
            start_position=self._position if start_position is None else start_position,
            crop=self.crop,
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
                slot, (n, extras, replaced) = run.get()
                self.stats.wait_seconds += time.perf_counter() - t0
                held.append(slot)
                wait_ready(slot)
                self._note_replaced(replaced)
                batch = {key: t[:n] for key, t in slot.device.items()}
                batch.update(extras)
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
            self.backend.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def _check_fields(self, fields: tuple[str, ...]) -> tuple[str, ...]:
        kinds = self.dataset.fields
        missing = [f for f in fields if f not in kinds]
        if missing:
            raise ValueError(f"fields {missing} are not in dataset {self.dataset.path}; "
                             f"it has {sorted(kinds)}")
        if "image" not in fields:
            raise ValueError("fields must include 'image'")
        return fields

    def _decoder_for_substitutes(self):
        # Substitutes are decoded on the CPU whatever the backend: failures are rare.
        if self._substitute_decoder is None:
            from chute.pipelines._backend_cpu import CpuBackend

            # same decoder options as the main backend when it is the cpu one: a substitute
            # then gets the pixels it gets anywhere else in the epoch
            options = {**self._spec.options, "threads": 1} if self._spec.name == "cpu" else {}
            spec = replace(self._spec, name="cpu", options=options)
            self._substitute_decoder = CpuBackend(spec)
        return self._substitute_decoder.decode


class _Run:
    """One pass over a plan: slots, the backend's epoch reader and the prefetch thread."""

    def __init__(self, pipe: Pipeline, plan: BatchPlan):
        ds, spec = pipe.dataset, pipe._spec
        kinds = ds.fields
        self.scalars = {f: np.asarray(ds.column(f)) for f in pipe.fields if kinds[f] == "scalar"}
        self.others = [f for f in pipe.fields if f != "image" and kinds[f] != "scalar"]
        self.dataset = ds
        shapes = {"image": (spec.image_shape(spec.batch_size), spec.numpy_dtype),
                  **{f: ((spec.batch_size,), c.dtype) for f, c in self.scalars.items()},
                  "index": ((spec.batch_size,), np.dtype(np.int64))}
        on_device = pipe.backend.output_on_device
        slots = allocate_slots(spec.prefetch + 2, shapes, pipe.device,
                               device_only=("image",) if on_device else ())
        self.stream = torch.cuda.Stream(pipe.device) if pipe.device.type == "cuda" else None
        self.on_device = on_device
        self.reader = pipe.backend.open_epoch(plan, 0)
        self.plan = plan
        self.substitutor = Substitutor(ds, plan, pipe._decoder_for_substitutes, pipe.on_error)
        self.prefetcher = Prefetcher(slots, self.fill, range(len(plan)))

    def fill(self, slot, iteration: int):
        ids, boxes, flips = self.plan.batch(iteration)
        n = len(ids)
        stream_ctx = torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()
        with stream_ctx:
            begin_fill(slot, self.stream)
            out = slot.device["image"][:n] if self.on_device else slot.host["image"][:n]
            status = self.reader.read(iteration, ids, boxes, flips, out)
            ids, replaced = self.substitutor.fix(ids, np.asarray(status), out)
            slot.host["index"][:n] = ids
            for name, column in self.scalars.items():
                np.take(column, ids, out=slot.host[name][:n])
            rows = [self.dataset[int(i)] for i in ids] if self.others else []
            extras = {f: [row[f] for row in rows] for f in self.others}
            stage(slot, n, self.stream)
        return n, extras, replaced

    def get(self):
        return self.prefetcher.get()

    def release(self, slot) -> None:
        release(slot)
        self.prefetcher.release(slot)

    def close(self) -> None:
        self.prefetcher.close()
        self.reader.close()
