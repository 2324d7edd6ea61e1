"""What compute devices this process can use, without importing any GPU library eagerly."""

from __future__ import annotations

import functools
import os

__all__ = ["cuda_device_count", "require_cuda", "usable_cpu_count"]


def usable_cpu_count() -> int:
    """CPUs this process may run on (affinity / cgroup pinning respected)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """Number of CUDA devices visible to torch (0 on CPU builds or without a driver)."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver counts as no device
        return 0


def require_cuda(what: str, device: str = "cuda") -> None:
    """Raise a clear BackendUnavailableError when `what` needs CUDA and none exists."""
    from chute.errors import BackendUnavailableError

    if cuda_device_count() == 0:
        raise BackendUnavailableError(
            f"{what} was asked to run on device {device!r}, but no CUDA device is available on "
            "this machine (torch.cuda.is_available() is False). Use backend='cpu' or device='cpu', "
            "or run on a machine with an NVIDIA GPU and driver."
        )
