"""`chute convert --overwrite` killed at random moments (issue 11, defect 6): the destination
always holds the old or the new dataset, whole, and the next `--overwrite` needs no cleanup."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chute.readers import open_dataset, verify_dataset
from tests.readers._images import jpeg_bytes

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

REPO = Path(__file__).resolve().parents[2]
TRIALS = 20


def _source(root: Path, seed: int) -> Path:
    for k in range(6):
        path = root / f"c{k % 2}" / f"{k}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg_bytes(24 + 4 * k, 20 + k, seed=seed * 100 + k))
    return root


def _command(src: Path, dst: Path) -> list[str]:
    return [sys.executable, "-m", "chute.cli", "convert", "imagefolder", str(src), str(dst),
            "--overwrite", "--workers", "1", "--no-progress", "--shard-size", "1KB"]


def _listing(parent: Path, dst: Path) -> tuple:
    inner = tuple(sorted(os.listdir(dst))) if dst.is_dir() else ()
    return tuple(sorted(os.listdir(parent))), inner


def _run(command, env, parent, dst, kill_after: float | None) -> float:
    """Run the convert; with `kill_after`, SIGKILL it that many seconds after it starts to
    change the destination's folder (or after it exits). Returns the write phase's length."""
    before = _listing(parent, dst)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while proc.poll() is None and _listing(parent, dst) == before:
        time.sleep(0.0005)
    started = time.monotonic()
    if kill_after is None:
        assert proc.wait(timeout=120) == 0
        return time.monotonic() - started
    while proc.poll() is None and time.monotonic() - started < kill_after:
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return 0.0


def test_overwrite_killed_at_random_moments_leaves_a_whole_dataset(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sources = [_source(tmp_path / "a", 1), _source(tmp_path / "b", 2)]
    parent = tmp_path / "out"
    parent.mkdir()
    dst = parent / "d.chute"
    fingerprints = []
    write_time = 0.0
    for src in sources:  # the two datasets a kill may leave, and how long writing takes
        write_time = max(write_time, _run(_command(src, dst), env, parent, dst, None))
        fingerprints.append(open_dataset(dst).fingerprint)
    assert fingerprints[0] != fingerprints[1]
    rng = random.Random(11)
    seen = set()
    for trial in range(TRIALS):
        src = sources[trial % 2]
        _run(_command(src, dst), env, parent, dst, rng.uniform(0, 1.2 * write_time))
        ds = open_dataset(dst)
        assert ds.fingerprint in fingerprints, f"trial {trial}: neither dataset"
        assert verify_dataset(dst) == [], f"trial {trial}"
        seen.add(fingerprints.index(ds.fingerprint))
    # a later --overwrite just works, and leaves nothing behind
    _run(_command(sources[0], dst), env, parent, dst, None)
    assert open_dataset(dst).fingerprint == fingerprints[0]
    assert os.listdir(parent) == ["d.chute"]
    print(f"write phase {write_time:.3f} s; kills left datasets {sorted(seen)}")
