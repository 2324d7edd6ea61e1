"""dev.sh's device detection, with a faked nvidia-smi: the CUDA torch build and chute's GPU
extras of its CUDA version where a driver lists a GPU (that of the torch already in the venv,
else the newest the driver runs), the CPU build and chute[test] elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

DEV_SH = Path(__file__).resolve().parents[1] / "dev.sh"


def detect(tmp_path: Path, smi: str | None, **env) -> str:
    """`./dev.sh detect` with only a fake nvidia-smi (when given) in front of the system PATH."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not available")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    if smi is not None:
        script = fake_bin / "nvidia-smi"
        script.write_text(f"#!/bin/sh\n{smi}\n")
        script.chmod(0o755)
    system = [p for p in os.environ.get("PATH", "").split(os.pathsep)
              if not (Path(p) / "nvidia-smi").exists()]  # a real one must not leak in
    environ = {"PATH": os.pathsep.join([str(fake_bin), *system]), "HOME": str(tmp_path),
               "CHUTE_VENV": str(tmp_path / "no-venv"), **env}  # the repository's torch: none
    proc = subprocess.run(["bash", str(DEV_SH), "detect"], capture_output=True, text=True,
                          env=environ, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def smi(cuda: str | None) -> str:
    """A fake nvidia-smi listing a GPU for -L, and a header naming `cuda` (if any) otherwise."""
    header = f'echo "| NVIDIA-SMI 580.65   Driver Version: 580.65   CUDA Version: {cuda} |"'
    listing = 'echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1234)"'
    return listing if cuda is None else f'if [ "$1" = -L ]; then {listing}; else {header}; fi'


def test_a_listed_gpu_selects_the_cuda_build_and_the_gpu_extra(tmp_path):
    out = detect(tmp_path, smi(None))  # a driver that does not say its CUDA version: 12
    assert out == 'device=gpu cuda=12 torch="torch==2.13.0" extras=.[test,gpu-cu12]'
    assert detect(tmp_path, smi("12.8")) == out


def test_a_cuda_13_driver_selects_the_cuda_13_build_and_extras(tmp_path):
    assert detect(tmp_path, smi("13.0")) == (
        'device=gpu cuda=13 torch="torch==2.13.0 --index-url '
        'https://download.pytorch.org/whl/cu130" extras=.[test-cu13,gpu-cu13]')


@pytest.mark.parametrize("built, want", [("12.8", "12"), ("13.0", "13")])
def test_the_torch_in_the_venv_decides_over_the_driver(tmp_path, built, want):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {built}\n")  # what `import torch` would print
    python.chmod(0o755)
    driver = "12.4" if want == "13" else "13.0"
    assert f"cuda={want} " in detect(tmp_path, smi(driver), CHUTE_VENV=str(venv))


def test_a_custom_torch_index_is_passed_on_gpu_machines(tmp_path):
    for cuda in ("12.8", "13.0"):
        out = detect(tmp_path, smi(cuda), CHUTE_TORCH_INDEX="file:///w")
        assert 'torch="torch==2.13.0 --index-url file:///w"' in out


@pytest.mark.parametrize("smi", [
    None,  # no driver installed
    'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; '
    "exit 9",  # installed, not loaded
    'echo "No devices were found"; exit 6',
])
def test_no_working_driver_selects_the_cpu_build(tmp_path, smi):
    assert detect(tmp_path, smi) == 'device=cpu torch="torch==2.13.0" extras=.[test]'


def test_override_and_its_validation(tmp_path):
    assert detect(tmp_path, None, CHUTE_DEVICE="gpu").startswith("device=gpu")
    assert detect(tmp_path, 'echo "GPU 0: X"', CHUTE_DEVICE="cpu").startswith("device=cpu")
    assert "cuda=13 " in detect(tmp_path, smi("12.8"), CHUTE_CUDA="13")
    for bad in ({"CHUTE_DEVICE": "tpu"}, {"CHUTE_DEVICE": "gpu", "CHUTE_CUDA": "11"}):
        proc = subprocess.run(["bash", str(DEV_SH), "detect"], capture_output=True, text=True,
                              env={**os.environ, **bad}, timeout=30)
        assert proc.returncode == 2 and list(bad)[-1] in proc.stderr


def test_the_gpu_bundle_is_kept_out_of_git():
    """`./dev.sh gpu-bundle` writes .gpu-bundle/ (tens of MiB of wheels): never committed."""
    if shutil.which("git") is None:
        pytest.skip("git is not available")
    proc = subprocess.run(["git", "check-ignore", "-q", ".gpu-bundle/site/x.so"],
                          cwd=DEV_SH.parent, timeout=30)
    assert proc.returncode == 0
