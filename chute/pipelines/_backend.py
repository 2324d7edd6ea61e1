"""The backend interface: what a decoder must provide to be driven by a Pipeline.

A backend turns planned batches (sample ids + crop boxes + flips, from a `BatchPlan`) into image
tensors. The Pipeline owns order, partition, resume, prefetch, staging and error substitution;
a backend only decodes. Backends live in `chute/pipelines/_backend_<name>.py` and expose
`create(spec: BackendSpec) -> Backend`; they are looked up by name through `create_backend`.

Interface (all a backend has to implement)::

    backend = module.create(spec)           # spec: BackendSpec (dataset, output shape, ...)
    backend.name                            # "cpu", "dali", ...
    backend.output_on_device                # False: read() fills a host numpy array
                                            # True:  read() fills a torch tensor on spec.device
    epoch = backend.open_epoch(plan, first_iteration)   # once per epoch (or resume)
    status = epoch.read(iteration, ids, boxes, flips, out)
    epoch.close(); backend.close()

Rules of `open_epoch` / `read`:
- `open_epoch(plan, first_iteration)` is called when iteration starts (each epoch, after
  `load_state_dict`, after `set_epoch`). `plan` is a picklable `BatchPlan`; `plan.batch(it)` is a
  pure function returning (ids, boxes, flips) for iteration `it` of this rank. A backend with its
  own look-ahead (DALI's external source + prefetch queue) may call `plan.batch(it)` for
  iterations ahead of the ones `read` has been asked for so far.
- `read(iteration, ids, boxes, flips, out)` is called from ONE thread (the Pipeline's prefetch
  thread) for iteration = first_iteration, first_iteration + 1, ... strictly in order, never
  skipping one, until the plan ends or `epoch.close()`. `ids, boxes, flips` are exactly
  `plan.batch(iteration)` (int64 [B], int32 [B, 4] as top/left/height/width, bool [B]);
  B may be smaller than spec.batch_size for the last batch of an eval epoch.
- `out` is the image output for this batch, already sliced to B samples: shape [B, 3, H, W]
  (layout "NCHW") or [B, H, W, 3] ("NHWC"), dtype spec.dtype. A numpy array (host memory, pinned
  when spec.device is CUDA) if `output_on_device` is False, else a torch tensor on spec.device.
  The backend writes every sample of `out` and returns `status`: uint8 numpy [B], 0 = ok,
  non-zero = that sample failed to decode (its slot in `out` is ignored and replaced by the
  Pipeline). The backend must not keep a reference to `out` after `read` returns.
- Device backends: when `read` returns, the writes to `out` must be complete or enqueued on
  `torch.cuda.current_stream()` of the calling thread (the Pipeline's side stream), e.g. by making
  that stream wait on an event recorded on the backend's own stream. The Pipeline records its
  ready-event on that stream after `read`, the substitution of failed samples and the
  host-to-device copies (`stage`).
- Resize, flip, normalisation and layout follow contract #3 (PIL antialiased bilinear), so
  every backend produces the same pixels for the same (ids, boxes, flips) up to decoder rounding.
- Errors that are not per-sample (missing library, no device) raise BackendUnavailableError
  with a message naming the backend and what to install/change; they propagate to the user.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from chute.errors import BackendUnavailableError

__all__ = [
    "Backend",
    "BackendSpec",
    "EpochReader",
    "BACKENDS",
    "create_backend",
]

# backend name -> module defining `create(spec)`; imported only when that backend is asked for,
# so the GPU backends' imports never run on the CPU path.
BACKENDS: dict[str, str] = {
    "cpu": "chute.pipelines._backend_cpu",
    "dali": "chute.pipelines._backend_dali",
    "dali-native": "chute.pipelines._backend_dali",
}


@dataclass(frozen=True)
class BackendSpec:
    """Everything a backend needs to build its decoder once, before any epoch.

    `dataset` is a chute.readers.Dataset; `size` is the output (H, W); `dtype` one of "uint8",
    "float16", "float32"; `mean`/`std` are per-channel fractions of 255 (ignored for uint8);
    `device` is "cpu" or "cuda:N"; `prefetch` is how many batches the Pipeline keeps in flight
    (a backend with its own queue may use it as its depth); `options` are the user's
    backend_options (cpu: threads, dct_scaling; dali: hw_decoder_load, ...).
    """

    name: str
    dataset: Any
    batch_size: int
    size: tuple[int, int]
    dtype: str
    layout: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    device: str
    prefetch: int = 2
    options: dict = field(default_factory=dict)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def image_shape(self, batch: int) -> tuple[int, int, int, int]:
        h, w = self.size
        return (batch, 3, h, w) if self.layout == "NCHW" else (batch, h, w, 3)


class EpochReader(Protocol):
    def read(
        self,
        iteration: int,
        ids: np.ndarray,
        boxes: np.ndarray,
        flips: np.ndarray,
        out: Any,
    ) -> np.ndarray: ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str
    output_on_device: bool

    def open_epoch(self, plan: Any, first_iteration: int) -> EpochReader: ...

    def close(self) -> None: ...


def create_backend(spec: BackendSpec) -> Backend:
    """Import the backend module named by spec.name and build the backend."""
    module_name = BACKENDS.get(spec.name)
    if module_name is None:
        raise ValueError(
            f"unknown backend {spec.name!r}; choose one of {sorted(BACKENDS)} or 'auto'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"backend {spec.name!r} cannot be loaded ({exc}). Install its dependencies "
            "(e.g. `pip install chute[gpu]` for the DALI backends) or use backend='cpu'."
        ) from exc
    create: Callable[[BackendSpec], Backend] = module.create
    return create(spec)
