"""backend="auto": which backend a Pipeline uses when the user does not name one.

Choosing by measurement is the autotuner's job, and pipelines do not import it (it is a library
beside them; chute/_auto_backend.py composes the two). So "auto" goes through an injection
point: a resolver registered with `register_auto_resolver` decides. `import chute` followed by
`chute.Pipeline` registers chute's autotuner. Without a registered resolver the one rule that
needs no measuring still applies: where the GPU backends cannot run, "cpu" is the only choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from chute.errors import BackendUnavailableError
from chute.pipelines.producers._candidates import dali_unavailable_reason

__all__ = ["AutoResolver", "register_auto_resolver", "resolve_backend", "cpu_without_measuring"]

if TYPE_CHECKING:
    import torch

log = logging.getLogger("chute")

# Called with keyword arguments device (str), dataset, batch_size, image_size, dtype, augment;
# returns (backend name, backend options, reason).
AutoResolver = Callable[..., tuple[str, dict, str]]

_resolver: AutoResolver | None = None


def register_auto_resolver(resolver: AutoResolver | None) -> AutoResolver | None:
    """Make `resolver` decide backend="auto" from now on, in this process.

    Args:
        resolver: called as `resolver(device=..., dataset=..., batch_size=..., image_size=...,
            dtype=..., augment=...)` and returns (backend name, backend options, reason);
            None unregisters.

    Returns:
        The resolver registered before (so a caller can restore it).
    """
    global _resolver
    previous, _resolver = _resolver, resolver
    return previous


def cpu_without_measuring(
    device: str, cuda_devices: int | None = None
) -> tuple[str, dict, str] | None:
    """("cpu", {}, reason) when the GPU backends cannot run for `device` here, else None.

    Args:
        device: where batches go ("cpu", "cuda", "cuda:N").
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    why = dali_unavailable_reason(device, cuda_devices)
    if why is None:
        return None
    # only cpu candidates: nothing to compare the CPU with
    return "cpu", {}, f"cpu chosen without measuring: the GPU backends cannot run here ({why})"


def _resolve_auto(**request) -> tuple[str, dict, str]:
    if _resolver is not None:
        return _resolver(**request)
    unmeasured = cpu_without_measuring(request["device"])
    if unmeasured is not None:
        return unmeasured
    raise BackendUnavailableError(
        f"backend='auto' on device {request['device']!r} needs the autotuner to choose between "
        "the CPU and GPU backends, and none is registered (chute.pipelines.Pipeline does not "
        "load it). Use chute.Pipeline, which registers it, or name a backend: backend='cpu', "
        "'dali' or 'dali-native'."
    )


def resolve_backend(
    requested: str,
    *,
    device: torch.device | str,
    dataset,
    batch_size: int,
    image_size: tuple[int, int],
    dtype: str,
    augment: str,
    backend_options: dict | None = None,
) -> tuple[str, dict, str]:
    """The backend a Pipeline uses: (backend name, backend options, why).

    Args:
        requested: a backend name, or "auto" to let the registered resolver choose.
        device: where batches go (a torch.device or its name).
        dataset: the opened dataset.
        batch_size: images per batch.
        image_size: output (height, width).
        dtype: output dtype name.
        augment: "train" or "eval".
        backend_options: the user's options; they always win over chosen ones.

    Raises:
        BackendUnavailableError: "auto" where the GPU backends could run but no resolver is
            registered.
    """
    user_options = dict(backend_options or {})
    if requested != "auto":
        return requested, user_options, f"backend={requested!r} was requested"
    name, options, reason = _resolve_auto(
        device=str(device), dataset=dataset, batch_size=batch_size, image_size=image_size,
        dtype=dtype, augment=augment)
    log.info("backend='auto' chose %s %s: %s", name, options, reason)
    return name, {**options, **user_options}, reason
