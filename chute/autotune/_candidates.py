"""What the autotuner can try on this machine: candidates and the probes that decide availability.

A candidate is one backend with one set of `backend_options`. Unavailable candidates are kept
(with the reason) so the table shows what this machine cannot run and why.
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass, field

__all__ = [
    "Candidate",
    "BACKEND_ORDER",
    "DALI_HW_DECODER_LOADS",
    "cpu_thread_counts",
    "dali_unavailable_reason",
    "enumerate_candidates",
    "usable_cpu_count",
]

# Cheapest first: ties are broken towards the CPU (it leaves the GPU to the model), and between
# the DALI variants towards chute's fused kernel path rather than the reference DALI-native one.
BACKEND_ORDER = ("cpu", "dali", "dali-native")

# DALI's default is 0.65; 0 keeps all decoding on CUDA cores, 0.9 gives most to the hardware
# JPEG decoder (A100/H100 class GPUs have one).
DALI_HW_DECODER_LOADS = (0.65, 0.0, 0.9)

DALI_INSTALL_HINT = "nvidia-dali-cuda120 not installed (pip install chute[dali])"


@dataclass(frozen=True)
class Candidate:
    """One backend with one set of options. `cost` orders candidates from cheapest to dearest
    (the tie-break); `priority` orders measurement, so a short budget measures the likeliest
    winners of each backend first."""

    name: str
    backend: str
    params: dict = field(default_factory=dict, hash=False, compare=False)
    available: bool = True
    reason: str = ""
    cost: tuple = ()
    priority: int = 0


def usable_cpu_count() -> int:
    """CPUs this process may run on (affinity / cgroup pinning respected)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cpu_thread_counts(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself: a grid that stays small on many-core machines."""
    counts, t = [], 1
    while t < n:
        counts.append(t)
        t *= 2
    counts.append(n)
    return counts


@functools.lru_cache(maxsize=1)
def _dali_import_error() -> str | None:
    try:
        importlib.import_module("nvidia.dali")
    except ImportError:
        return DALI_INSTALL_HINT
    except Exception as exc:  # a broken install: say what broke rather than hide it
        return f"nvidia.dali failed to import ({type(exc).__name__}: {exc})"
    return None


def dali_unavailable_reason(device: str, cuda_devices: int) -> str | None:
    """Why the DALI backends cannot run for `device` here, or None when they can."""
    if cuda_devices == 0:
        return "no CUDA device available"
    if not device.startswith("cuda"):
        return f"device={device!r} requested; the DALI backends deliver batches on a CUDA device"
    return _dali_import_error()


def _fmt_load(load: float) -> str:
    return f"{load:g}"


def enumerate_candidates(
    device: str, *, cpu_count: int | None = None, cuda_devices: int | None = None
) -> list[Candidate]:
    """Every candidate for `device` on this machine, available or not, cheapest first."""
    if cpu_count is None:
        cpu_count = usable_cpu_count()
    if cuda_devices is None:
        from chute._device import cuda_device_count

        cuda_devices = cuda_device_count()

    candidates = []
    threads = cpu_thread_counts(cpu_count)
    for t in threads:
        for dct in (True, False):
            candidates.append(
                Candidate(
                    name=f"cpu threads={t} dct={'on' if dct else 'off'}",
                    backend="cpu",
                    params={"threads": t, "dct_scaling": dct},
                    cost=(BACKEND_ORDER.index("cpu"), t, 0 if dct else 1),
                    # all threads with DCT scaling is the likeliest CPU winner: measure it first
                    priority=0 if (t == cpu_count and dct) else 2,
                )
            )
    dali_reason = dali_unavailable_reason(device, cuda_devices)
    for backend in ("dali", "dali-native"):
        for i, load in enumerate(DALI_HW_DECODER_LOADS):
            candidates.append(
                Candidate(
                    name=f"{backend} hw_decoder_load={_fmt_load(load)}",
                    backend=backend,
                    params={"hw_decoder_load": load},
                    available=dali_reason is None,
                    reason=dali_reason or "",
                    cost=(BACKEND_ORDER.index(backend), i, 0),
                    priority=(0 if backend == "dali" else 1) if i == 0 else 2,
                )
            )
    return sorted(candidates, key=lambda c: c.cost)
