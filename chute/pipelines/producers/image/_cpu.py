"""Image producer `cpu`: gather the batch's encoded bytes, decode + augment with
chute.fallbacks.

Options (`backend_options`): "threads" (decoder threads, default: OMP_NUM_THREADS, else the
physical cores divided among this machine's ranks; see `default_threads`),
"dct_scaling" (let libjpeg-turbo downscale in the DCT domain when the crop allows; default: on
in train, off in eval, where outputs must match the exact transform; docs/design.md, "Resize
definition")
"roi_decode" (decode only each crop's region: None = when available, the default; True =
required; False = full frames) and "max_pixels" (the largest image decoded, default
CHUTE_MAX_IMAGE_PIXELS or 178,956,970). An image whose header disagrees with the dataset's
height/width columns fails its sample before it is decoded (docs/design.md, "Decompression
bombs").
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from chute.pipelines._common._distributed import default_threads
from chute.pipelines._common._options import parse_flag
from chute.pipelines._common._stages import StageTimes
from chute.pipelines.producers._contract import ImageSpec, check_options
from chute.pipelines.producers._inflight import DecodeWorkers, InFlightEpoch, free_event
from chute.pipelines.producers.image._producer import ImageProducerBase
from chute.pipelines.producers.image._warmup import mark_compiled, note_first_compile

__all__ = ["CpuBackend", "CpuDecodeOptions", "create", "candidates"]


@dataclass(frozen=True)
class CpuDecodeOptions:
    """The cpu backend's `backend_options`, parsed once when the producer is built (its
    defaults are the only ones).

    Args:
        threads: decoder threads; None: `default_threads()`.
        dct_scaling: downscale in the DCT domain; None: on in train, off in eval.
        roi_decode: decode only each crop's region; None: when available.
        max_pixels: the largest image decoded; None: CHUTE_MAX_IMAGE_PIXELS or Pillow's bound.
    """

    threads: int | None = None
    dct_scaling: bool | None = None
    roi_decode: bool | None = None
    max_pixels: int | None = None

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> CpuDecodeOptions:
        """The options of a `backend_options` dict, yes/no ones parsed strictly; unknown ones
        raise, naming those known.

        Args:
            options: the backend options.
        """
        check_options("cpu", dict(options), {f.name for f in fields(cls)})
        made = cls(**options)
        return replace(made, dct_scaling=parse_flag(made.dct_scaling, "dct_scaling"),
                       roi_decode=parse_flag(made.roi_decode, "roi_decode"))


class CpuBackend(ImageProducerBase):
    name = "cpu"
    output_on_device = False

    def __init__(self, spec: ImageSpec):
        options = CpuDecodeOptions.from_dict(spec.options)
        super().__init__(spec)
        from chute.fallbacks import (
            decode_batch,
            decode_views,
            load_turbojpeg,
            max_image_pixels,
            release_scratch,
        )

        load_turbojpeg()  # a missing libturbojpeg fails here, at construction, not at next()
        self._decode_batch = decode_batch
        self._decode_views = decode_views
        self._release_scratch = release_scratch
        self.max_pixels = max_image_pixels(options.max_pixels)
        self._sizes = self.size_table()
        self.threads = options.threads
        self.threads_reason = "backend_options['threads']"
        if self.threads is None:
            self.threads, self.threads_reason = default_threads()
        self.dct_scaling = (spec.augment == "train" if options.dct_scaling is None
                            else options.dct_scaling)
        self.roi_decode = options.roi_decode
        self.stages = StageTimes()  # the Pipeline gives its own (pipelines/_common/_stages.py)
        self._compiled = False  # set after the first decode (Numba kernels compiled or loaded)
        self._sync = _Gather()  # the scratch of decode() outside an epoch (substitutes)
        self.workers: DecodeWorkers | None = None  # made by the first open_epoch

    def open_epoch(self, plan, first_iteration: int) -> InFlightEpoch:
        # the next batch's bytes are gathered while this one decodes (docs/pipeline.md,
        # "Batches in flight"): two gather workers, each with its own scratch
        if self.workers is None:
            self.workers = DecodeWorkers(2, _Gather, self._gather_batch,
                                         name=f"chute-gather-{self.field}")
        return InFlightEpoch(self, plan, first_iteration, self.workers, len(self.workers))

    def _gather_batch(self, state: _Gather, request) -> tuple:
        state.free.wait()  # the batch that used this scratch has been decoded
        state.free.clear()
        try:
            return state, self._gather(state, request.ids)
        except BaseException:
            state.free.set()
            raise

    def _gather(self, state: _Gather, ids) -> tuple[np.ndarray, np.ndarray]:
        with self.stages.measure(f"{self.field}/prepare"):  # the encoded bytes, gathered
            data, offsets = self.spec.dataset.gather(ids, self.field, out=state.scratch)
        if not np.shares_memory(data, state.scratch):
            state.scratch = _grown(data.nbytes)  # too small: the reader allocated; grow for next
        return data, offsets

    def complete(self, gathered: tuple, request, out: dict) -> np.ndarray:
        state, data = gathered
        try:
            return self.fill(request, out, data)
        finally:
            state.free.set()

    def discard(self, gathered: tuple) -> None:
        gathered[0].free.set()

    def fill(self, request, out: dict, gathered: tuple | None = None) -> np.ndarray:
        if self.spec.views:  # one decode per sample, every view resampled from it
            return self.decode(request.ids, request.params[f"{self.field}.view_boxes"],
                               request.params[f"{self.field}.view_flips"],
                               [out[key] for key in self.view_shapes(1)], gathered)
        return self.decode(request.ids, request.params["boxes"], request.params["flips"],
                           out[self.field], gathered)

    def decode(self, ids, boxes, flips, out, gathered: tuple | None = None) -> np.ndarray:
        """Decode samples `ids` with crops `boxes`/`flips` into `out`; status per sample.
        Views: boxes [B, V, 4], flips [B, V] and `out` a list of V batches. `gathered`: their
        encoded bytes (data, offsets) when already gathered."""
        data, offsets = self._gather(self._sync, ids) if gathered is None else gathered
        variant = f"{self.spec.numpy_dtype}-{self.spec.layout}"
        if isinstance(out, list):  # the views kernel compiles per number of views
            variant = f"{len(out)}views-{variant}"
        if not self._compiled:
            note_first_compile(variant)
        decode: Any = self._decode_batch
        if isinstance(out, list):
            decode, float_out = self._decode_views, out[0].dtype != np.uint8
        else:
            float_out = out.dtype != np.uint8
        with self.stages.measure(f"{self.field}/decode+resample"):  # one fused Numba pass
            status = self._run_decode(decode, data, offsets, boxes, flips, out, float_out, ids)
        if not self._compiled:
            self._compiled = True
            mark_compiled(variant)
        return status

    def _run_decode(self, decode, data, offsets, boxes, flips, out, float_out, ids):
        return decode(
            data, offsets, boxes, flips, out,
            mean=self.spec.mean if float_out else None,
            std=self.spec.std if float_out else None,
            layout=self.spec.layout,
            dct_scaling=self.dct_scaling,
            roi_decode=self.roi_decode,
            threads=self.threads,
            sizes=self._sizes[ids],
            max_pixels=self.max_pixels,
        )

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
            self.workers = None
        self._sync = _Gather()
        self._release_scratch()  # the decoder's pixel scratch, sized by the largest image


@dataclass
class _Gather:
    """A gather worker's scratch for a batch's encoded bytes (grows to the largest batch);
    `free` once the batch gathered into it has been decoded."""

    scratch: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint8))
    free: threading.Event = field(default_factory=free_event)


def _grown(nbytes: int) -> np.ndarray:
    # headroom so that slightly larger batches later do not reallocate every time
    return np.empty(int(nbytes * 1.25) + 4096, dtype=np.uint8)


def create(spec: ImageSpec) -> CpuBackend:
    return CpuBackend(spec)


def candidates(device: str) -> list:
    """Autotune candidates of this producer (thread counts x DCT scaling)."""
    from chute.pipelines.producers._candidates import cpu_candidates

    return cpu_candidates(device)
