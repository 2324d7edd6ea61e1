"""backend="auto": which backend a Pipeline uses when the user does not name one.

This is the single hook into the autotuner (chute.autotune sits above pipelines, so it is
imported lazily here): a stored decision for this machine, dataset and batch shape when one
exists; `cpu` without measuring when no GPU backend can run; else a quick measured tune.
"""

from __future__ import annotations

import logging

import torch

__all__ = ["resolve_backend"]

log = logging.getLogger("chute")


def resolve_backend(
    requested: str,
    *,
    device: torch.device,
    dataset,
    batch_size: int,
    image_size: tuple[int, int],
    dtype: str,
    augment: str,
    backend_options: dict | None = None,
) -> tuple[str, dict, str]:
    """Return (backend name, backend options, why). The user's own options always win."""
    user_options = dict(backend_options or {})
    if requested != "auto":
        return requested, user_options, f"backend={requested!r} was requested"
    from chute.autotune import resolve_auto_backend

    name, options, reason = resolve_auto_backend(
        dataset, batch_size=batch_size, image_size=image_size, augment=augment, dtype=dtype,
        device=str(device))
    log.info("backend='auto' chose %s %s: %s", name, options, reason)
    return name, {**options, **user_options}, reason
