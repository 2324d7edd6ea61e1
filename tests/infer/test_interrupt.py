import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def test_ctrl_c_stops_every_replica(tmp_path, video_dataset):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"stages": [
        {"name": "slow", "fn": "tests.infer._stages:slow", "replicas": 2}]}))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cli = subprocess.Popen([sys.executable, "-m", "chute.cli", "infer-bench", str(config),
                            str(video_dataset), "--requests", "200", "--no-progress"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + 60
        replicas: set[int] = set()
        while len(replicas) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            replicas = {p for p in _children_of(cli.pid)
                        if b"multiprocessing.spawn" in Path(f"/proc/{p}/cmdline").read_bytes()
                        and b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()}
        assert len(replicas) == 2, "the replicas did not start"
        time.sleep(1.0)  # requests are running
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, err
    assert "interrupted" in err
    time.sleep(0.2)
    assert not [p for p in replicas if Path(f"/proc/{p}").exists()]
