"""dev.sh's device detection, with a faked nvidia-smi: the CUDA torch build and chute[test,gpu]
where a driver lists a GPU, the CPU build and chute[test] elsewhere."""

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
    environ = {"PATH": os.pathsep.join([str(fake_bin), *system]), "HOME": str(tmp_path), **env}
    proc = subprocess.run(["bash", str(DEV_SH), "detect"], capture_output=True, text=True,
                          env=environ, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_listed_gpu_selects_the_cuda_build_and_the_gpu_extra(tmp_path):
    out = detect(tmp_path, 'echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1234)"')
    assert out == 'device=gpu torch="torch==2.13.0" extras=.[test,gpu]'


def test_a_custom_torch_index_is_passed_on_gpu_machines(tmp_path):
    out = detect(tmp_path, 'echo "GPU 0: NVIDIA L4 (UUID: GPU-9)"', CHUTE_TORCH_INDEX="file:///w")
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
    proc = subprocess.run(["bash", str(DEV_SH), "detect"], capture_output=True, text=True,
                          env={**os.environ, "CHUTE_DEVICE": "tpu"}, timeout=30)
    assert proc.returncode == 2 and "CHUTE_DEVICE" in proc.stderr
