"""CUDA tensors between replicas of GPU stages: the producing replica turns each CUDA tensor of
its outputs into torch's CUDA IPC handle (pickled bytes, opaque to the parent, which never
touches the GPU); the consuming replica opens the handle and reads the producer's memory in
place (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

__all__ = ["CudaShared", "pack", "unpack", "to_host", "on_cuda"]


@dataclass(frozen=True)
class CudaShared:
    """One CUDA tensor in flight: torch's IPC reduction of it, pickled in the producer."""

    data: bytes


def on_cuda(devices: list[str]) -> bool:
    """True when any of `devices` is a CUDA device."""
    return any(str(d).startswith("cuda") for d in devices)


def _map(output: Any, fn) -> Any:
    """`output` with `fn` applied to every leaf of its lists, tuples and dicts."""
    if isinstance(output, (list, tuple)):
        return type(output)(_map(x, fn) for x in output)
    if isinstance(output, dict):
        return {k: _map(v, fn) for k, v in output.items()}
    return fn(output)


def pack(output: Any) -> Any:
    """`output` with every CUDA tensor replaced by its CudaShared handle (the producer keeps
    the memory until the consumer lets go of it: torch counts the references)."""
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401  (registers the CUDA IPC reduction of tensors)

    def leaf(x):
        if isinstance(x, torch.Tensor) and x.is_cuda:
            return CudaShared(bytes(ForkingPickler.dumps(x.detach())))
        return x

    return _map(output, leaf)


def unpack(payload: Any) -> Any:
    """`payload` with every CudaShared handle opened as the CUDA tensor it names."""
    return _map(payload, lambda x: pickle.loads(x.data) if isinstance(x, CudaShared) else x)


def to_host(output: Any) -> Any:
    """`output` with every CUDA tensor copied to the CPU (for a CPU stage or the client)."""
    import torch

    return _map(output, lambda x: x.cpu() if isinstance(x, torch.Tensor) and x.is_cuda else x)
