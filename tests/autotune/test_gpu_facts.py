"""pynvml paths with a stand-in module (no driver here): facts, utilisation sampling, and the
graceful "unknown" without NVML."""

import sys
import time
import types

import pytest

from chute.autotune import GpuSampler, gpu_facts


class NVMLError(Exception):
    pass


def fake_pynvml(fail_init=False):
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.open_sessions = 0  # NVML counts nvmlInit calls; each needs its nvmlShutdown

    def init():
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        m.open_sessions += 1

    def shutdown():
        if m.open_sessions == 0:
            raise NVMLError("Uninitialized")
        m.open_sessions -= 1

    m.nvmlInit = init
    m.nvmlShutdown = shutdown
    m.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetHandleByUUID = lambda uuid: (_ for _ in ()).throw(NVMLError("no uuid"))
    m.nvmlDeviceGetName = lambda h: {"h0": "NVIDIA A100-SXM4-40GB", "h1": "NVIDIA L4"}[h]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=80 if h == "h1" else 5)
    m.nvmlDeviceGetJpgUtilization = lambda h: [35, 166666]  # [%, sampling period in µs]

    def decoder(h):
        raise NVMLError("Not Supported")

    m.nvmlDeviceGetDecoderUtilization = decoder
    return m


def test_facts_and_sampling_with_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert gpu_facts() == {"driver": "550.54.15",
                           "gpus": ["NVIDIA A100-SXM4-40GB", "NVIDIA L4"]}
    with GpuSampler("cuda:1", interval=0.005) as sampler:
        time.sleep(0.05)
    assert sampler.samples and sampler.mean == pytest.approx(80.0)
    # the JPEG engines' own counter is read; one the driver does not support is left out
    assert sampler.engines == ["jpeg"] and sampler.engine_mean("jpeg") == pytest.approx(35.0)
    assert sampler.engine_mean("video_decoder") is None
    with GpuSampler("cpu", interval=0.005) as cpu_sampler:
        time.sleep(0.02)
    assert cpu_sampler.mean is None


def test_every_nvml_init_is_paired_with_a_shutdown(monkeypatch):
    nvml = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpu_facts()
    assert nvml.open_sessions == 0
    with GpuSampler("cuda:1", interval=0.005):
        assert nvml.open_sessions == 1  # held while sampling
        time.sleep(0.02)
    assert nvml.open_sessions == 0
    nvml.nvmlDeviceGetHandleByIndex = lambda i: (_ for _ in ()).throw(NVMLError("gone"))
    with GpuSampler("cuda:0", interval=0.005) as sampler:
        pass
    assert sampler.mean is None and nvml.open_sessions == 0


def test_no_driver_means_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    assert gpu_facts() == {"driver": None, "gpus": []}
    with GpuSampler("cuda:0", interval=0.005) as sampler:
        time.sleep(0.02)
    assert sampler.mean is None


def test_real_pynvml_without_driver_is_unknown_not_an_error():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass  # no driver here: what this test is about
    else:
        pytest.skip("this machine has an NVIDIA driver")
    assert gpu_facts() == {"driver": None, "gpus": []}
