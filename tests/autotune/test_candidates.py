"""The candidates the image backends declare for the autotuner
(chute/pipelines/producers/_candidates.py), and that the autotune library stays free of them."""

import subprocess
import sys

import pytest

import chute.pipelines.producers._candidates as cmod
from chute.autotune import CandidateLike
from chute.pipelines.producers._candidates import (
    cpu_candidates,
    dali_candidates,
    dali_unavailable_reason,
)
from chute.pipelines.producers.image._nvimgcodec import nvimgcodec_candidates


def backend_candidates(device, *, cpu_count=None, cuda_devices=None):
    """Every image backend's candidates, cheapest first, with the machine given."""
    found = [*cpu_candidates(device, cpu_count=cpu_count),
             *dali_candidates(device, cuda_devices=cuda_devices),
             *nvimgcodec_candidates(device, cuda_devices=cuda_devices)]
    return sorted(found, key=lambda c: c.cost)


def test_thread_grid_stays_small():
    assert cmod.cpu_thread_counts(1) == [1]
    assert cmod.cpu_thread_counts(2) == [1, 2]
    assert cmod.cpu_thread_counts(6) == [1, 2, 4, 6]
    assert cmod.cpu_thread_counts(64) == [1, 2, 4, 8, 16, 32, 64]


def test_cpu_grid_of_threads_and_dct():
    cpu = cpu_candidates("cpu", cpu_count=2)
    assert [c.params for c in cpu] == [
        {"threads": 1, "dct_scaling": True}, {"threads": 1, "dct_scaling": False},
        {"threads": 2, "dct_scaling": True}, {"threads": 2, "dct_scaling": False}]
    assert all(c.available and c.backend == "cpu" for c in cpu)
    assert all(isinstance(c, CandidateLike) for c in cpu)  # what the autotuner reads


def test_no_cuda_lists_dali_unavailable_with_the_reason():
    cands = backend_candidates("cpu", cpu_count=2, cuda_devices=0)
    gpu = [c for c in cands if c.backend.startswith("dali")]
    assert gpu == dali_candidates("cpu", cuda_devices=0)
    codecs = [c for c in cands if c.backend == "nvimgcodec"]  # its decoder configurations
    assert len(codecs) == 6
    assert all(not c.available and c.reason == "no CUDA device available" for c in codecs)
    assert {c.backend for c in gpu} == {"dali", "dali-native"}
    assert {c.params["hw_decoder_load"] for c in gpu} == set(cmod.DALI_HW_DECODER_LOADS)
    assert all(not c.available and c.reason == "no CUDA device available" for c in gpu)
    assert len({c.name for c in cands}) == len(cands)
    assert cands == sorted(cands, key=lambda c: c.cost)  # cheapest first: cpu, dali, native


def test_dali_reasons(monkeypatch):
    assert dali_unavailable_reason("cuda:0", 0) == "no CUDA device available"
    assert "deliver batches on a CUDA device" in dali_unavailable_reason("cpu", 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: cmod.DALI_INSTALL_HINT)
    assert dali_unavailable_reason("cuda:0", 1) == (
        "nvidia-dali-cuda120 not installed (pip install chute[dali])")
    cands = dali_candidates("cuda:0", cuda_devices=1)
    assert all(c.reason == cmod.DALI_INSTALL_HINT for c in cands)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: None)
    assert all(c.available for c in dali_candidates("cuda:0", cuda_devices=1))


def test_each_backend_default_is_measured_first(monkeypatch):
    monkeypatch.setattr(cmod, "dali_import_error", lambda: None)
    cands = backend_candidates("cuda:0", cpu_count=4, cuda_devices=1)
    first = sorted(cands, key=lambda c: (c.priority, c.cost))[:3]
    assert [c.name for c in first] == [
        "cpu threads=4 dct=on", "dali hw_decoder_load=0.65", "dali-native hw_decoder_load=0.65"]


@pytest.mark.slow
def test_importing_autotune_pulls_no_gpu_library_and_nothing_above_it():
    gpu = ["cupy", "cvcuda", "pynvml", "nvidia.dali", "torch"]
    above = ["chute.pipelines", "chute.readers", "chute.convert", "chute.fallbacks",
             "chute.kernels"]
    code = (f"import chute.autotune, sys; "
            f"print([m for m in {gpu + above!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_the_autotuner_compares_what_the_image_producers_declare():
    from chute.pipelines.producers._registry import image_candidates

    names = {c.name for c in image_candidates("cpu")}
    assert names == {c.name for c in backend_candidates("cpu")}
