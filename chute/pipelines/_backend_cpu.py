"""The `cpu` backend: gather the batch's encoded bytes, decode + augment with chute.fallbacks.

Options (`backend_options`): "threads" (decoder threads, default: the fallback's default),
"dct_scaling" (let libjpeg-turbo downscale in the DCT domain when the crop allows, default True)
and "roi_decode" (decode only each crop's region: None = when available, the default; True =
required; False = full frames).
"""

from __future__ import annotations

import numpy as np

from chute.pipelines._backend import BackendSpec

__all__ = ["CpuBackend", "create"]

_OPTIONS = {"threads", "dct_scaling", "roi_decode"}


class CpuBackend:
    name = "cpu"
    output_on_device = False

    def __init__(self, spec: BackendSpec):
        unknown = set(spec.options) - _OPTIONS
        if unknown:
            raise ValueError(
                f"unknown backend_options {sorted(unknown)} for backend 'cpu'; "
                f"it accepts {sorted(_OPTIONS)}"
            )
        from chute.fallbacks import decode_batch

        self._decode_batch = decode_batch
        self.spec = spec
        self.threads = spec.options.get("threads")
        self.dct_scaling = bool(spec.options.get("dct_scaling", True))
        roi = spec.options.get("roi_decode")
        self.roi_decode = None if roi is None else bool(roi)
        self._scratch = np.empty(0, dtype=np.uint8)  # grows to the largest batch of bytes

    def open_epoch(self, plan, first_iteration: int) -> _CpuEpoch:
        return _CpuEpoch(self)  # decoding is stateless between batches: nothing per epoch

    def decode(self, ids, boxes, flips, out: np.ndarray) -> np.ndarray:
        """Decode samples `ids` with crops `boxes`/`flips` into `out`; status per sample."""
        data, offsets = self.spec.dataset.gather(ids, "image", out=self._scratch)
        if not np.shares_memory(data, self._scratch):
            self._scratch = _grown(data.nbytes)  # too small: the reader allocated; grow for next
        float_out = out.dtype != np.uint8
        return self._decode_batch(
            data, offsets, boxes, flips, out,
            mean=self.spec.mean if float_out else None,
            std=self.spec.std if float_out else None,
            layout=self.spec.layout,
            dct_scaling=self.dct_scaling,
            roi_decode=self.roi_decode,
            threads=self.threads,
        )

    def close(self) -> None:
        self._scratch = np.empty(0, dtype=np.uint8)


class _CpuEpoch:
    def __init__(self, backend: CpuBackend):
        self.backend = backend

    def read(self, iteration, ids, boxes, flips, out) -> np.ndarray:
        return self.backend.decode(ids, boxes, flips, out)

    def close(self) -> None:
        pass


def _grown(nbytes: int) -> np.ndarray:
    # headroom so that slightly larger batches later do not reallocate every time
    return np.empty(int(nbytes * 1.25) + 4096, dtype=np.uint8)


def create(spec: BackendSpec) -> CpuBackend:
    return CpuBackend(spec)
