"""What a decision depends on: the machine, the dataset and the batch parameters, hashed into a
key. A new GPU, driver, DALI or chute version, changed data or changed parameters all give a new
key, so a stale decision is never reused."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
from dataclasses import asdict, dataclass

from chute._device import usable_cpu_count
from chute._version import __version__
from chute.autotune._gpu import gpu_facts

__all__ = ["TuneParams", "machine_fingerprint", "decision_key"]

_DALI_DISTRIBUTIONS = ("nvidia-dali-cuda120", "nvidia-dali-cuda130", "nvidia-dali-cuda110")


def _normal_dtype(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _normal_device(device) -> str:
    device = str(device)
    return "cuda:0" if device == "cuda" else device


def _normal_size(size) -> tuple[int, int]:
    if isinstance(size, int):
        return (size, size)
    h, w = size
    return (int(h), int(w))


@dataclass(frozen=True)
class TuneParams:
    """The batch shape a decision is valid for. Normalised on construction, so
    `TuneParams(64, 224, "train", torch.float16, "cuda")` equals
    `TuneParams(64, (224, 224), "train", "float16", "cuda:0")`."""

    batch_size: int
    image_size: tuple[int, int]
    augment: str
    dtype: str = "float16"
    device: str = "cpu"
    family: str = "image"  # the kind of field tuned ("image", "video", ...)
    shape: tuple = ()  # what else the family's throughput depends on (e.g. frames per clip)

    def __post_init__(self):
        if self.augment not in ("train", "eval"):
            raise ValueError(f"augment must be 'train' or 'eval', got {self.augment!r}")
        if int(self.batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size!r}")
        object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "image_size", _normal_size(self.image_size))
        object.__setattr__(self, "dtype", _normal_dtype(self.dtype))
        object.__setattr__(self, "device", _normal_device(self.device))
        object.__setattr__(self, "shape", tuple(self.shape))

    def as_dict(self) -> dict:
        d = asdict(self)
        d["image_size"] = list(self.image_size)
        if self.family == "image" and not self.shape:  # the keys decisions had before families
            del d["family"], d["shape"]
        else:
            d["shape"] = list(self.shape)
        return d


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _dali_version() -> str | None:
    for dist in _DALI_DISTRIBUTIONS:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def machine_fingerprint() -> dict:
    """CPU model and usable count, GPU names and driver (pynvml), DALI and chute versions."""
    gpus = gpu_facts()
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": usable_cpu_count(),
        "gpus": gpus["gpus"],
        "driver": gpus["driver"],
        "dali": _dali_version(),
        "chute": __version__,
    }


def decision_key(machine: dict, dataset_fingerprint: str, params: TuneParams) -> str:
    """A short stable hash of everything the decision depends on.

    Args:
        machine: `machine_fingerprint()` (or a stand-in in tests).
        dataset_fingerprint: the dataset's content fingerprint.
        params: the batch shape.
    """
    blob = json.dumps(
        {"machine": machine, "dataset": dataset_fingerprint, "params": params.as_dict()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]
