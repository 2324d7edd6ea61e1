"""CI runs examples/train_ddp.py under torchrun (2 CPU processes): train, checkpoint, resume."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipelines._pipeline_data import write_dataset

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

pytest.importorskip("chute.fallbacks._decode")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"


def torchrun(tmp_path, dataset, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--standalone", str(EXAMPLE), str(dataset), "--batch-size", "8",
           "--image-size", "32", "--checkpoint", str(tmp_path / "ckpt.pt"), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def read_log(path):
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
def test_train_checkpoint_resume_matches_uninterrupted(tmp_path):
    dataset = write_dataset(tmp_path / "tiny.chute", n=64, sizes=(32, 33))
    # 64 samples / (8 x 2 ranks) = 4 steps per epoch; checkpoint at step 5 = mid epoch 1
    torchrun(tmp_path, dataset, "--steps", "7", "--save-every", "5", "--trace",
             str(tmp_path / "full.jsonl"))
    out = torchrun(tmp_path, dataset, "--steps", "7", "--save-every", "100", "--resume",
                   "--trace", str(tmp_path / "resumed.jsonl"))
    assert "trained 7 steps" in out
    full, resumed = read_log(tmp_path / "full.jsonl"), read_log(tmp_path / "resumed.jsonl")
    assert sorted(resumed) == [6, 7]
    for step in (6, 7):
        assert resumed[step]["ids"] == full[step]["ids"]
        assert resumed[step]["epoch"] == full[step]["epoch"] == 1
        assert resumed[step]["loss"] == pytest.approx(full[step]["loss"], rel=1e-4)
    assert full[5]["ids"] != full[6]["ids"]
