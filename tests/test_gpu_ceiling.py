"""benchmarks/gpu_ceiling.py in its dry run (CHUTE_GPU_DRY_RUN=1), so that the one script a
GPU session runs for issues 36 and 40 never rots: every step A-G and V runs on the CPU as far
as it can and prints its rows (those that need a GPU say so), one markdown table, no failed
row, and a JSON file with the issue's goals."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a process (docs/testing.md)

ROOT = Path(__file__).resolve().parents[1]
NVIMGCODEC = importlib.util.find_spec("nvidia") is not None and \
    importlib.util.find_spec("nvidia.nvimgcodec") is not None
HEADER = "| step | row | status | img/s | CPU core-s / 1k img | SM % | JPEG % | detail |"


def test_the_dry_run_prints_every_step_and_the_goals(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "CHUTE_GPU_DRY_RUN": "1", "TMPDIR": str(tmp_path),
           "CHUTE_GPU_BUNDLE": str(tmp_path / "no-bundle")}
    env.pop("OUT", None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_ceiling.py"),
                           "--out", str(out)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines.count(HEADER) == 1 and lines[0] == HEADER, proc.stdout
    rows = [line.split(" | ") for line in lines[2:]]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    steps = {row[0][2:] for row in rows}
    assert set("ABCDEFGV") <= steps, steps
    statuses = [row[2] for row in rows]
    assert not [s for s in statuses if s.startswith(("FAILED", "TIMED OUT", "cut"))], \
        proc.stdout
    hazard = {row[2] for row in rows if row[0] == "| D"}
    assert hazard >= ({"needs a GPU", "ok"} if NVIMGCODEC else {"not installed "
                                                                 "(nvidia.nvimgcodec)"})
    assert (out / "gpu_ceiling.md").read_text().strip() == proc.stdout.strip()

    doc = json.loads((out / "gpu_ceiling.json").read_text())
    assert doc["dry_run"] is True and doc["device"] == "cpu"
    assert len(doc["rows"]) == len(rows)
    assert len(doc["goals"]) == 7
    assert all({"goal", "measured", "target", "status"} <= set(g) for g in doc["goals"])
    # the ratios the CPU twins can give are computed (torchvision's need torchvision)
    measured = {g["goal"].split(" vs ")[0]: g["measured"] for g in doc["goals"]}
    assert all(v is None or isinstance(v, float) for v in measured.values())
    if NVIMGCODEC:
        assert measured["training fed by nvimgcodec"] is not None
    end_to_end = [r for r in doc["rows"] if r["step"] == "E" and r["status"] == "ok"
                  and r.get("backend")]
    assert end_to_end and all(r["stages"]["stages"] for r in end_to_end)
