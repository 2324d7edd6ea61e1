"""What the image backends can try on this machine: their candidates for the autotuner, and the
probe that says whether the DALI backends can run.

A candidate is one backend with one set of `backend_options`. Unavailable candidates are kept
(with the reason) so the autotune table shows what this machine cannot run and why. Candidates
are `chute._candidate.Candidate` values, which the autotuner reads without either side importing
the other.
"""

from __future__ import annotations

import functools
import importlib

from chute import _device
from chute._candidate import Candidate

__all__ = [
    "ProducerCandidate",
    "cpu_unavailable_reason",
    "BACKEND_ORDER",
    "DALI_HW_DECODER_LOADS",
    "DALI_INSTALL_HINT",
    "dali_import_error",
    "cpu_thread_counts",
    "cpu_candidates",
    "dali_candidates",
    "dali_unavailable_reason",
    "cuda_unavailable_reason",
    "for_augment",
    "FIDELITY_EXACT",
    "FIDELITY_DCT",
    "FIDELITY_DALI_NATIVE",
]

# Cheapest first: ties are broken towards the CPU (it leaves the GPU to the model), and between
# the DALI variants towards chute's fused kernel path rather than the reference DALI-native one.
BACKEND_ORDER = ("cpu", "dali", "dali-native", "nvimgcodec")

# DALI's default is 0.65; 0 keeps all decoding on CUDA cores, 0.9 gives most to the hardware
# JPEG decoder (A100/H100 class GPUs have one).
DALI_HW_DECODER_LOADS = (0.65, 0.0, 0.9)

DALI_INSTALL_HINT = "nvidia-dali-cuda120 not installed (pip install chute[dali])"

# What the autotune table says of each candidate's pixels (docs/design.md, "Resize definition";
# benchmarks/bench_fidelity.py measures the errors).
FIDELITY_EXACT = "exact"
FIDELITY_DCT = "approx.: DCT-domain downscaling"
FIDELITY_DALI_NATIVE = "DALI resize; crop borders differ"


# Kept under its old name for readers of this module; one definition in the bottom layer.
ProducerCandidate = Candidate


def cpu_thread_counts(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself: a grid that stays small on many-core machines.

    Args:
        n: the most threads to try (at least 1).
    """
    counts, t = [], 1
    while t < n:
        counts.append(t)
        t *= 2
    counts.append(n)
    return counts


def cpu_unavailable_reason() -> str | None:
    """Why the cpu backend cannot run here (libjpeg-turbo's TurboJPEG library missing), or None."""
    from chute.errors import BackendUnavailableError
    from chute.fallbacks import turbojpeg_library

    try:
        turbojpeg_library()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def cpu_candidates(device: str, *, cpu_count: int | None = None) -> list[ProducerCandidate]:
    """The cpu backend over a thread grid, with and without DCT-domain downscaling.

    Args:
        device: where batches go; the cpu backend serves every device, so it does not matter
            here (kept so every backend's candidates are asked for the same way).
        cpu_count: the most threads to try (default: the CPUs this process may use).
    """
    del device  # the cpu backend decodes on the host for every device
    if cpu_unavailable_reason() is not None:
        return []  # "auto" then compares only what can run
    if cpu_count is None:
        cpu_count = _device.usable_cpu_count()
    candidates = []
    for t in cpu_thread_counts(cpu_count):
        for dct in (True, False):
            candidates.append(ProducerCandidate(
                name=f"cpu threads={t} dct={'on' if dct else 'off'}",
                backend="cpu",
                params={"threads": t, "dct_scaling": dct},
                cost=(BACKEND_ORDER.index("cpu"), t, 0 if dct else 1),
                # all threads with DCT scaling is the likeliest CPU winner: measure it first
                priority=0 if (t == cpu_count and dct) else 2,
                fidelity=FIDELITY_DCT if dct else FIDELITY_EXACT,
            ))
    return candidates


@functools.lru_cache(maxsize=1)
def dali_import_error() -> str | None:
    """Why nvidia.dali cannot be imported here (what to install, or what broke), or None."""
    try:
        importlib.import_module("nvidia.dali")
    except ImportError:
        return DALI_INSTALL_HINT
    except Exception as exc:  # a broken install: say what broke rather than hide it
        return f"nvidia.dali failed to import ({type(exc).__name__}: {exc})"
    return None


def cuda_unavailable_reason(device: str, cuda_devices: int | None = None,
                            why_cuda: str = "the GPU backends deliver batches on a CUDA "
                                            "device") -> str | None:
    """Why no GPU backend can deliver batches for `device` here (no CUDA device, or a CPU
    device asked for), or None when a CUDA device is there and asked for. What each backend
    needs beyond that (DALI, nvImageCodec, CuPy) its own candidates say.

    Args:
        device: where batches go ("cpu", "cuda", "cuda:N").
        cuda_devices: CUDA devices visible (default: asked of torch).
        why_cuda: what the reason says after "device='cpu' requested;".
    """
    if cuda_devices is None:
        cuda_devices = _device.cuda_device_count()
    if cuda_devices == 0:
        return "no CUDA device available"
    if not str(device).startswith("cuda"):
        return f"device={str(device)!r} requested; {why_cuda}"
    return None


def dali_unavailable_reason(device: str, cuda_devices: int | None = None) -> str | None:
    """Why the DALI backends cannot run for `device` here, or None when they can.

    Args:
        device: where batches go ("cpu", "cuda", "cuda:N").
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    return (cuda_unavailable_reason(device, cuda_devices,
                                    "the DALI backends deliver batches on a CUDA device")
            or dali_import_error())


def dali_candidates(device: str, *, cuda_devices: int | None = None) -> list[ProducerCandidate]:
    """The dali and dali-native backends over a hw_decoder_load grid, unavailable (with the
    reason) where they cannot run.

    Args:
        device: where batches go; the DALI backends need a CUDA device.
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    reason = dali_unavailable_reason(device, cuda_devices)
    candidates = []
    for backend in ("dali", "dali-native"):
        for i, load in enumerate(DALI_HW_DECODER_LOADS):
            candidates.append(ProducerCandidate(
                name=f"{backend} hw_decoder_load={load:g}",
                backend=backend,
                params={"hw_decoder_load": load},
                available=reason is None,
                reason=reason or "",
                cost=(BACKEND_ORDER.index(backend), i, 0),
                priority=(0 if backend == "dali" else 1) if i == 0 else 2,
                fidelity=FIDELITY_EXACT if backend == "dali" else FIDELITY_DALI_NATIVE,
            ))
    return candidates


def for_augment(candidates, augment: str) -> list:
    """The candidates the autotuner may choose from for `augment`: in eval, none that scales in
    the DCT domain (a cheaper decode with larger error: evaluation numbers must match the exact
    transform; docs/design.md, "Autotune"), so a tune never switches it on in eval.

    Args:
        candidates: every backend's candidates.
        augment: "train" or "eval".
    """
    if augment != "eval":
        return list(candidates)
    return [c for c in candidates if not c.params.get("dct_scaling", False)]
