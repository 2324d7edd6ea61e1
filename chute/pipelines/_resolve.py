"""backend="auto": which backend a Pipeline uses when the user does not name one.

This is the single hook the autotuner plugs into (chute.autotune): it receives everything a
decision needs and returns a backend name from chute.pipelines._backend.BACKENDS.
"""

from __future__ import annotations

import importlib.util

import torch

__all__ = ["_resolve_backend"]


def _resolve_backend(
    requested: str,
    *,
    device: torch.device,
    dataset,
    batch_size: int,
    image_size: tuple[int, int],
    dtype: str,
    augment: str,
) -> str:
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "cpu"  # without a CUDA device there is nothing to compare
    # Until the autotuner measures, prefer the GPU decoder when DALI is installed.
    return "dali" if importlib.util.find_spec("nvidia.dali") is not None else "cpu"
