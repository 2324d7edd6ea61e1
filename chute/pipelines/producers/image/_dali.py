"""Backends `dali` and `dali-native`: a DALI pipeline per rank fed by a pure external source.

- `dali` (device cuda): DALI decodes each sample's crop window on the GPU (device="mixed", ROI
  decode), then chute's fused CUDA kernel (`chute.kernels.resize_normalize`) resizes, flips,
  normalizes and lays the crops out straight into the Pipeline's torch CUDA tensor.
  Multi-crop views (docs/views.md): one window per sample holding every view's margin, then
  one launch of the views kernel for all views (`chute.kernels.resize_normalize_views`).
- `dali-native` (device cuda or cpu): the same reader and ROI decode, then DALI's own
  `fn.resize(antialias=True)` + `fn.crop_mirror_normalize`. With device="cpu" the graph runs in
  DALI's CPU-only mode (device_id=None): how a machine without a GPU runs the DALI reader.

One DALI pipeline serves one epoch reader; a finished epoch's pipeline is reset and reused for the
next epoch when the plans follow each other (DALI's epoch_idx then selects the epoch), otherwise
(resume, set_epoch jumps, early break) it is rebuilt.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import cast

import numpy as np

from chute._device import require_cuda
from chute.errors import BackendUnavailableError, ChuteError
from chute.pipelines.producers._dali._graph import DaliGraphConfig, build_dali_pipeline, import_dali
from chute.pipelines.producers._dali._output import KernelWriter, write_native
from chute.pipelines.producers.image._dali_source import (
    DaliBatchSource,
    cupy_import_error,
    staging_for,
)
from chute.pipelines.producers.image._placeholder import PLACEHOLDER_BOX, refusals
from chute.pipelines.producers.image._producer import ImageProducerBase

__all__ = ["create", "candidates", "DaliBackend", "DaliOptions", "DecodeWarning"]


class DecodeWarning(UserWarning):
    """Samples DALI could not decode; their status is non-zero and the Pipeline replaces them."""


@dataclasses.dataclass(frozen=True)
class DaliOptions:
    """`backend_options` of the DALI backends.

    hw_decoder_load: share of JPEGs sent to the hardware decoder (A100/H100 NVJPG), 0..1.
    num_threads: DALI CPU threads. py_workers: > 0 runs the external source in that many forked
    worker processes (DALI parallel external source). staging: "pinned" (GPU decode: gather each
    batch into page-locked memory handed to DALI without a copy) or "views" (DALI copies the
    memory-mapped bytes itself); CPU mode, parallel workers and machines without CuPy use "views".
    py_start_method: "fork" or "spawn" for the workers; None picks "fork" unless this process
    already holds a CUDA context (forking it would break CUDA in the workers), then "spawn".
    max_pixels: the largest image header handed to DALI (default: `CHUTE_MAX_IMAGE_PIXELS` or
    Pillow's bound); larger ones, and headers that disagree with the height/width columns, fail
    their sample before DALI decodes it.
    """

    hw_decoder_load: float = 0.65
    max_pixels: int | None = None
    num_threads: int = max(1, min(4, os.cpu_count() or 1))
    py_workers: int = 0
    staging: str = "pinned"
    py_start_method: str | None = None

    @classmethod
    def from_dict(cls, options: dict | None) -> DaliOptions:
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"unknown DALI backend_options {unknown}; the DALI backends accept {sorted(known)}"
            )
        made = cls(**options)
        if made.max_pixels is not None:
            from chute.fallbacks import max_image_pixels

            max_image_pixels(made.max_pixels)  # a ValueError naming the option
        if not 0.0 <= made.hw_decoder_load <= 1.0:
            raise ValueError(f"hw_decoder_load must be in [0, 1], got {made.hw_decoder_load}")
        if made.py_start_method not in (None, "fork", "spawn"):
            raise ValueError(f"py_start_method must be 'fork' or 'spawn', got "
                             f"{made.py_start_method!r}")
        if made.staging not in ("pinned", "views"):
            raise ValueError(f"staging must be 'pinned' or 'views', got {made.staging!r}")
        return made


def candidates(device: str) -> list:
    """Autotune candidates of the DALI producers (hw_decoder_load grid). `dali` launches chute's
    kernel through CuPy: without CuPy it is listed as unavailable, saying so; `dali-native`
    stages through views instead."""
    from chute.pipelines.producers._candidates import dali_candidates

    found = dali_candidates(device)
    missing = cupy_import_error()
    if missing is None:
        return found
    return [dataclasses.replace(c, available=False, reason=c.reason or missing)
            if c.backend == "dali" else c for c in found]


def create(spec) -> DaliBackend:
    """The `dali` or `dali-native` backend for a BackendSpec (fails fast when it cannot run)."""
    variant = "kernel" if spec.name == "dali" else "native"
    device_id = _device_id(spec.name, spec.device, variant)
    import_dali()
    if variant == "kernel" and cupy_import_error() is not None:
        raise BackendUnavailableError(
            f"backend 'dali' launches chute's CUDA kernel through CuPy: {cupy_import_error()}. "
            "Install it, or use backend='dali-native' or 'cpu'."
        )
    options = DaliOptions.from_dict(spec.options)
    return DaliBackend(spec, variant, device_id, options)


def _device_id(name: str, device: str, variant: str) -> int | None:
    if device.startswith("cuda"):
        require_cuda(f"backend {name!r}", device)
        return int(device.partition(":")[2] or 0)
    if variant == "kernel":
        raise BackendUnavailableError(
            f"backend {name!r} runs chute's CUDA kernel and needs device='cuda' (got {device!r}); "
            "to run the DALI reader on the CPU use backend='dali-native' with device='cpu', "
            "or backend='cpu'."
        )
    return None


def _default_start_method() -> str:
    import sys

    torch = sys.modules.get("torch")  # only asked when torch is already in use
    initialized = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    return "spawn" if initialized else "fork"


class DaliBackend(ImageProducerBase):
    """Creates one DALI pipeline per epoch reader (reused across consecutive epochs)."""

    def __init__(self, spec, variant: str, device_id: int | None, options: DaliOptions):
        super().__init__(spec)
        self.name = spec.name
        self.variant = variant
        self.device_id = device_id
        self.options = options
        self.output_on_device = device_id is not None
        self._finished: DaliEpoch | None = None  # last epoch, fully read, pipeline kept for reuse
        self._kernel_writer = (
            KernelWriter(spec.mean, spec.std, spec.layout) if variant == "kernel" else None
        )

    def graph_config(self) -> DaliGraphConfig:
        spec, opts = self.spec, self.options
        # tuple(): a user's ImageSpec may hold lists; the lengths are ImageSpec's annotations
        return DaliGraphConfig(
            variant=self.variant,
            batch_size=spec.batch_size,
            image_size=cast("tuple[int, int]", tuple(spec.size)),
            device_id=self.device_id,
            dtype=spec.dtype,
            layout=spec.layout,
            mean=cast("tuple[float, float, float]", tuple(spec.mean)),
            std=cast("tuple[float, float, float]", tuple(spec.std)),
            num_threads=opts.num_threads,
            prefetch=max(1, spec.prefetch),
            hw_decoder_load=opts.hw_decoder_load,
            parallel=opts.py_workers > 0,
            py_num_workers=max(1, opts.py_workers),
            py_start_method=opts.py_start_method or _default_start_method(),
        )

    def make_source(self, plan, first_iteration: int) -> DaliBatchSource:
        on_gpu = self.device_id is not None and self.options.py_workers == 0
        return DaliBatchSource(
            plan, first_iteration, field=self.field,
            staging=staging_for(self.options.staging, on_gpu),
            ring=max(1, self.spec.prefetch) + 2,
            margin_for=(cast("tuple[int, int]", tuple(self.spec.size))
                        if self.variant == "kernel" else None),
            size_fields=cast("tuple[str, str]", tuple(self.spec.size_fields)),
            with_roi=self.variant == "native",
            max_pixels=self.options.max_pixels,
            view_sizes=(tuple(cast("tuple[int, int]", tuple(crop.size))
                              for crop in self.spec.views) if self.spec.views else None),
        )

    def targets(self, out: dict):
        """The output this backend writes: the field's batch, or the list of every view's."""
        if self.spec.views:
            return [out[key] for key in self.view_shapes(1)]
        return out[self.field]

    def fill(self, request, out: dict) -> np.ndarray:
        """Random access (substitutes): the CPU decoder, with this backend's output format."""

        if self.spec.views:
            return decode_batch_on_cpu(request.ids, request.params[f"{self.field}.view_boxes"],
                                       request.params[f"{self.field}.view_flips"],
                                       self.targets(out), self.spec)
        return decode_batch_on_cpu(request.ids, request.params["boxes"],
                                   request.params["flips"], out[self.field], self.spec)

    def open_epoch(self, plan, first_iteration: int) -> DaliEpoch:
        previous, self._finished = self._finished, None
        if previous is not None:
            reused = previous.next_epoch(plan, first_iteration)
            if reused is not None:
                return reused
            previous.close()
        return DaliEpoch(self, plan, first_iteration)

    def epoch_finished(self, epoch: DaliEpoch) -> None:
        if self._finished is not None and self._finished is not epoch:
            self._finished.close()
        self._finished = epoch

    def close(self) -> None:
        if self._finished is not None:
            self._finished.close()
            self._finished = None


class DaliEpoch:
    """Reads one epoch's batches, in order, from a DALI pipeline."""

    def __init__(self, backend: DaliBackend, plan, first_iteration: int, epoch_idx: int = 0,
                 pipe=None, source: DaliBatchSource | None = None):
        self.backend = backend
        self.plan = plan
        self.next_iteration = first_iteration
        self.epoch_idx = epoch_idx
        self.source = source or backend.make_source(plan, first_iteration)
        self.pipe = pipe if pipe is not None else self._build(self.source)

    def _build(self, source: DaliBatchSource):
        return build_dali_pipeline(source, self.backend.graph_config())

    def read(self, request, out: dict) -> np.ndarray:
        iteration = request.iteration
        ids, boxes, flips = self.source.crops(request)  # every view's, with views
        out = self.backend.targets(out)
        if iteration != self.next_iteration:
            raise ChuteError(
                f"DALI epoch reader asked for iteration {iteration}, expected "
                f"{self.next_iteration}: iterations must be read in order without gaps"
            )
        self.next_iteration += 1
        status = np.zeros(len(ids), dtype=np.uint8)
        try:
            outputs = self._run(out)
        except StopIteration as err:
            raise ChuteError(
                f"the DALI pipeline ended before iteration {iteration} of a plan with "
                f"{len(self.plan)} batches (dataset {self.plan.dataset.url})"
            ) from err
        except RuntimeError as err:
            status = self._recover(err, iteration, ids, boxes, flips, out)
        else:
            status = self._check_ids(outputs[-1], ids, iteration)
            self._write(outputs, ids, boxes, flips, out, status)
        if self.next_iteration >= len(self.plan):
            self.backend.epoch_finished(self)
        return status

    def _run(self, out):
        if self.backend.device_id is None:
            return self.pipe.run()
        import torch

        first = out[0] if isinstance(out, list) else out
        stream = torch.cuda.current_stream(first.device)
        # Outputs bound to the caller's stream: our kernel/copy enqueued on it runs after DALI.
        return self.pipe.run(stream)

    def _check_ids(self, index_tl, ids, iteration) -> np.ndarray:
        """The batch's status: the source's refusals (placeholders), after checking that DALI
        delivered the plan's samples."""
        # a CPU output in every graph
        delivered, status = refusals(np.asarray(index_tl.as_array()))
        if not np.array_equal(delivered, np.asarray(ids, dtype=np.int64)):
            raise ChuteError(
                f"DALI delivered samples {delivered[:4].tolist()}... for iteration {iteration}, "
                f"but the plan says {np.asarray(ids[:4]).tolist()}...: reader out of step (a bug)"
            )
        return status

    def _write(self, outputs, ids, boxes, flips, out, status) -> None:
        if self.backend.variant == "native":
            write_native(outputs[0], out)
        else:
            _, inner = self.source.windows(ids, boxes)  # the crop inside each decoded window
            # a refused sample's decoded window is the placeholder (its pixels are replaced)
            inner[status != 0] = PLACEHOLDER_BOX
            writer = self.backend._kernel_writer
            assert writer is not None  # the "kernel" variant (not "native") has one
            if isinstance(out, list):  # multi-crop views: one launch for all of them
                writer.write_views(outputs[0], inner, flips, out)
            else:
                writer.write(outputs[0], inner, flips, out)

    def _recover(self, err, iteration, ids, boxes, flips, out) -> np.ndarray:
        """A DALI error kills its pipeline: find the bad samples with the CPU decoder, fill the
        batch from it, and continue with a new pipeline from the next iteration."""

        status = decode_batch_on_cpu(ids, boxes, flips, out, self.backend.spec)
        if not status.any():
            # Every sample decodes on the CPU: this is not bad data but a broken DALI path.
            raise BackendUnavailableError(
                f"DALI failed on batch {iteration} of {self.plan.dataset.url} although every "
                f"sample of it decodes on the CPU: {err}. Use backend='cpu' and report this."
            ) from err
        bad = [int(i) for i in np.asarray(ids)[status != 0]]
        warnings.warn(
            f"DALI could not decode samples {bad} of {self.plan.dataset.url} "
            f"(batch {iteration}): {str(err).splitlines()[0] if str(err) else err!r}",
            DecodeWarning,
            stacklevel=3,
        )
        self.close()
        self.source = self.backend.make_source(self.plan, iteration + 1)
        self.epoch_idx = 0
        if iteration + 1 < len(self.plan):
            self.pipe = self._build(self.source)
        return status

    def next_epoch(self, plan, first_iteration: int) -> DaliEpoch | None:
        """This finished epoch's pipeline, reset for `plan` when it is the plan that follows."""
        if self.pipe is None or first_iteration != 0:
            return None
        if plan != self.source.plan_for(self.epoch_idx + 1):
            return None
        try:
            self.pipe.run()  # past the end: DALI must report the end of the epoch
        except StopIteration:
            self.pipe.reset()
        else:
            return None
        epoch, self.pipe = DaliEpoch(self.backend, plan, 0, self.epoch_idx + 1, self.pipe,
                                     self.source), None
        return epoch

    def close(self) -> None:
        self.pipe = None


def decode_batch_on_cpu(ids, boxes, flips, out, spec) -> np.ndarray:
    """Decode one batch with chute's CPU decoder into `out`, to tell which samples are corrupt
    when a DALI pipeline fails (DALI reports a failure per batch, not per sample); returns the
    per-sample status. Multi-crop views: `out` is the list of V view batches, boxes [B, V, 4]
    and flips [B, V]."""
    from chute.pipelines.producers.image._cpu import CpuBackend

    # The cpu backend with its defaults (DALI's options mean nothing to it).
    cpu = CpuBackend(dataclasses.replace(spec, name="cpu", options={}))
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    hosts = [np.empty(tuple(o.shape), dtype=spec.numpy_dtype) for o in outs]
    status = cpu.decode(np.asarray(ids, dtype=np.int64), np.asarray(boxes, dtype=np.float64),
                        np.asarray(flips, dtype=bool),
                        hosts if isinstance(out, (list, tuple)) else hosts[0])
    for target, host in zip(outs, hosts, strict=True):
        if isinstance(target, np.ndarray):
            np.copyto(target, host)
        else:
            import torch

            target.copy_(torch.from_numpy(host))
    return np.asarray(status, dtype=np.uint8)
