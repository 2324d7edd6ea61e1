"""benchmarks/gpu_first_run.sh in its dry run (CHUTE_GPU_DRY_RUN=1), so that the script a GPU
session runs once never rots: every step runs on the CPU as far as it can, it installs nothing
(pip, apt-get and friends on PATH fail the test), and it prints one markdown table with no
failed row; torchvision's rows say "not installed" where torchvision is."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

ROOT = Path(__file__).resolve().parents[1]
INSTALLERS = ("pip", "pip3", "apt-get", "apt", "dpkg", "sudo", "conda", "uv")


def test_the_dry_run_prints_one_table_and_installs_nothing(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is not available")
    fake_bin, called = tmp_path / "bin", tmp_path / "installers-called"
    fake_bin.mkdir()
    for name in INSTALLERS:
        tool = fake_bin / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "{called}"\nexit 1\n')
        tool.chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(fake_bin), os.environ.get("PATH", "")]),
           "CHUTE_GPU_DRY_RUN": "1", "CHUTE_PYTHON": sys.executable,
           "CHUTE_GPU_BUNDLE": str(tmp_path / "no-bundle"), "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_first_run.sh")], env=env,
                          capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr
    assert not called.exists(), called.read_text()
    lines = proc.stdout.strip().splitlines()
    assert lines[:2] == ["| step | status | detail |", "|---|---|---|"]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:]), proc.stdout
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in lines[2:]}
    assert rows["run"] == "dry run"
    assert [s for s in rows.values() if s in ("FAILED", "TIMED OUT", "CHECK")] == [], proc.stdout
    assert any(step.startswith("pytest -m gpu") for step in rows)
    assert any(step.startswith("memcheck") for step in rows)
    assert rows["bench 64: chute cpu"] == "ok"
    assert rows["bench views: chute cpu"] == "ok"
    assert rows["bench views: chute nvimgcodec (CPU twin)"] in ("ok", "not installed")
    assert not any("dali-native" in step for step in rows if step.startswith("bench views"))
    assert any(step.startswith("fidelity") for step in rows)
    if importlib.util.find_spec("torchvision") is None:
        assert rows["bench 64: torchvision decode_jpeg + v2 (CPU)"] == "not installed"
        assert rows["torchvision"] == "not installed"
