import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

ROOT = Path(__file__).resolve().parents[2]


def _children_of(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == str(pid):
                out.add(int(entry.name))
    return out


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_ctrl_c_after_a_killed_replica_stops_every_process_and_frees_shared_memory(
        tmp_path, video_dataset):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"stages": [
        {"name": "slow", "fn": "tests.infer._stages:slow_marked", "replicas": 2}]}))
    marks = tmp_path / "marks"  # one file per replica process that has served a request
    marks.mkdir()
    env = {**os.environ, "CHUTE_TEST_MARKS": str(marks),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cli = subprocess.Popen([sys.executable, "-m", "chute.cli", "infer-bench", str(config),
                            str(video_dataset), "--requests", "4000", "--no-progress"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def serving() -> set[int]:
        return {int(p.name) for p in marks.iterdir()}

    seen: set[int] = set()  # every child of the CLI: replicas, restarts, resource tracker
    try:
        assert _wait_for(lambda: len(serving()) == 2, 120), "the replicas did not serve"
        seen |= _children_of(cli.pid)
        victim = min(serving())
        os.kill(victim, signal.SIGKILL)
        assert _wait_for(lambda: len(serving()) == 3, 120), "no restarted replica served"
        seen |= _children_of(cli.pid)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, err
    assert "interrupted" in out and f"(pid {victim}) died" in err
    assert "| slow | 2 |" in out  # the partial report
    assert serving() <= seen and len(seen) >= 3
    assert _wait_for(lambda: not [p for p in seen if Path(f"/proc/{p}").exists()], 10), \
        f"processes left: {[p for p in seen if Path(f'/proc/{p}').exists()]}"
    # torch names its shared-memory files after the creating process
    left = [n for n in os.listdir("/dev/shm")
            for p in seen | {cli.pid} if n.startswith(f"torch_{p}_")]
    assert not left, left


def test_ctrl_c_in_the_middle_of_a_replica_restart_stops_at_once(tmp_path, video_dataset):
    """The interrupt lands while a killed replica's successor is spawned but not yet ready
    (held there by the test hook until the pipeline closes)."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"stages": [
        {"name": "slow", "fn": "tests.infer._stages:slow_marked", "replicas": 2}]}))
    marks, held = tmp_path / "marks", tmp_path / "restarting"
    marks.mkdir()
    env = {**os.environ, "CHUTE_TEST_MARKS": str(marks), "CHUTE_TEST_HOLD_RESTART": str(held),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cli = subprocess.Popen([sys.executable, "-m", "chute.cli", "infer-bench", str(config),
                            str(video_dataset), "--requests", "4000", "--no-progress", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    seen: set[int] = set()
    try:
        assert _wait_for(lambda: len(list(marks.iterdir())) == 2, 120), "no replica served"
        time.sleep(2.0)  # past the warm-up (two 0.2 s calls): the measured run is under way
        os.kill(min(int(p.name) for p in marks.iterdir()), signal.SIGKILL)
        assert _wait_for(held.exists, 60), "the restart was not reached"
        seen |= _children_of(cli.pid)
        began = time.monotonic()
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert time.monotonic() - began < 20
    assert cli.returncode == 130, err
    assert out, err
    report = json.loads(out)
    assert report["stopped"] and report["exit_status"] == 130 and report["completed"] > 0
    assert report["stages"]["slow"]["restarts"] == 1
    assert len(seen) >= 3  # the two replicas' successors and the resource tracker
    assert _wait_for(lambda: not [p for p in seen if Path(f"/proc/{p}").exists()], 10), \
        f"processes left: {[p for p in seen if Path(f'/proc/{p}').exists()]}"
