"""GPU facts and utilisation through pynvml, imported lazily; everything degrades to "unknown"
(None / empty) where pynvml or the NVIDIA driver is missing."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

__all__ = ["gpu_facts", "GpuSampler"]


def _nvml():
    """The initialised pynvml module, or None when it cannot be used here. Every successful
    call must be paired with `_nvml_done` (NVML counts initialisations)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # NVMLError_LibraryNotFound / DriverNotLoaded without a driver
        return None
    return pynvml


def _nvml_done(nvml) -> None:
    """The nvmlShutdown that pairs one successful `_nvml()`."""
    if nvml is not None:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_facts() -> dict:
    """{"driver": str | None, "gpus": [name, ...]} of this machine (empty without NVML)."""
    nvml = _nvml()
    if nvml is None:
        return {"driver": None, "gpus": []}
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        count = nvml.nvmlDeviceGetCount()
        names = [_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(count)]
    except nvml.NVMLError:
        return {"driver": None, "gpus": []}
    finally:
        _nvml_done(nvml)
    return {"driver": driver, "gpus": names}


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index else 0


def _nvml_handle(nvml, device: str):
    """The NVML handle of torch's `device`. NVML numbers every GPU of the machine while CUDA
    numbers the visible ones (CUDA_VISIBLE_DEVICES), so match by UUID when torch knows it."""
    index = _device_index(device)
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        return nvml.nvmlDeviceGetHandleByIndex(index)


# NVML's counters besides SM use: the hardware JPEG engines (NVJPG) and video decoders (NVDEC)
# have their own, and SM use alone says nothing about a hardware decode (docs/benchmarks.md)
_ENGINES = {"jpeg": "nvmlDeviceGetJpgUtilization",
            "video_decoder": "nvmlDeviceGetDecoderUtilization"}


class GpuSampler:
    """Samples the GPU utilisation (%) of `device` on a background thread while active: SM use
    (`samples`, `mean`) and, where the driver reports them, the hardware JPEG engines' and
    video decoders' (`engine_samples`, `engine_mean(name)`; `engines` names those it read).

    Use as a context manager around the measured window; `mean` is None when nothing could be
    sampled (CPU device, no pynvml, no driver)."""

    def __init__(self, device: str, interval: float = 0.05):
        self.device = device
        self.interval = interval
        self.samples: list[float] = []
        self.engine_samples: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._nvml: Any = None  # the pynvml module (untyped) while sampling

    def __enter__(self) -> GpuSampler:
        if not self.device.startswith("cuda"):
            return self
        nvml = _nvml()
        if nvml is None:
            return self
        try:
            self._handle = _nvml_handle(nvml, self.device)
        except nvml.NVMLError:
            _nvml_done(nvml)
            return self
        self._nvml = nvml
        self._thread = threading.Thread(target=self._run, name="chute-gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        readers = {name: getattr(nvml, fn) for name, fn in _ENGINES.items()
                   if hasattr(nvml, fn)}
        while not self._stop.wait(self.interval):
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            except nvml.NVMLError:
                return
            self.samples.append(float(rates.gpu))
            for name, read in list(readers.items()):
                try:  # [utilisation %, sampling period µs]
                    value = read(handle)
                except nvml.NVMLError:  # not supported on this GPU or driver: stop asking
                    del readers[name]
                    continue
                util = value[0] if isinstance(value, (list, tuple)) else value
                self.engine_samples.setdefault(name, []).append(float(util))

    @property
    def engines(self) -> list[str]:
        """The engine counters this driver reported ("jpeg", "video_decoder")."""
        return sorted(self.engine_samples)

    def engine_mean(self, name: str) -> float | None:
        """Mean utilisation (%) of engine `name`, None where it was not reported."""
        found = self.engine_samples.get(name)
        return sum(found) / len(found) if found else None

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _nvml_done(self._nvml)
        self._nvml = None

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None
