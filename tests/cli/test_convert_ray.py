"""`chute convert ... --engine ray` (chute/_cli/_engine.py): the same multiset of (payload
bytes, label) as the single-process convert, `chute verify` passes, the Ray options are
refused without `--engine ray`, and the command runs on its own local Ray instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from chute.cli import main
from chute.readers import open_dataset
from tests.ray._sources import image_folder


def payloads(path) -> Counter:
    dataset = open_dataset(path)
    return Counter((bytes(dataset[i]["image"]), int(dataset[i]["label"]))
                   for i in range(len(dataset)))


@pytest.mark.slow
def test_convert_imagefolder_on_ray_equals_the_single_process_convert(tmp_path, capsys,
                                                                       ray_local):
    src = image_folder(tmp_path / "src")
    assert main(["convert", "imagefolder", str(src), str(tmp_path / "one"), "--json",
                 "--shard-size", "2KB"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["convert", "imagefolder", str(src), str(tmp_path / "ray"), "--json",
                 "--shard-size", "2KB", "--engine", "ray", "--task-size", "4"]) == 0
    on_ray = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in on_ray.items() if k not in ("path", "report")} == \
        {k: v for k, v in one.items() if k not in ("path", "report")}
    assert payloads(tmp_path / "ray") == payloads(tmp_path / "one")
    assert (tmp_path / "ray" / "skipped.tsv").read_text() == \
        (tmp_path / "one" / "skipped.tsv").read_text()
    assert main(["verify", str(tmp_path / "ray")]) == 0


@pytest.mark.parametrize(("flags", "message"), [
    (["--task-size", "4"], "--task-size applies only with --engine ray"),
    (["--ray-address", "auto"], "--ray-address applies only with --engine ray"),
    (["--engine", "ray", "--workers", "2"], "--workers does not apply with --engine ray"),
])
def test_ray_options_are_refused_where_they_would_be_ignored(tmp_path, capsys, flags, message):
    src = image_folder(tmp_path / "src")
    with pytest.raises(SystemExit) as exc:  # a usage error (tests/cli/test_args.py)
        main(["convert", "imagefolder", str(src), str(tmp_path / "dst"), *flags])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "dst").exists()


@pytest.mark.slow
def test_the_command_starts_its_own_local_ray_instance(tmp_path):
    src = image_folder(tmp_path / "src")
    done = subprocess.run([sys.executable, "-c", "import sys; from chute.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "convert", "imagefolder", str(src),
                           str(tmp_path / "ray"), "--engine", "ray", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wrote 26 samples" in done.stdout and "Traceback" not in done.stderr
    assert main(["convert", "imagefolder", str(src), str(tmp_path / "one"),
                 "--no-progress"]) == 0
    assert payloads(tmp_path / "ray") == payloads(tmp_path / "one")


@pytest.mark.slow
@pytest.mark.parametrize("address", ["127.0.0.1:9", "auto"])
def test_an_address_where_no_cluster_runs_is_one_line_and_writes_nothing(tmp_path, address):
    src = image_folder(tmp_path / "src")
    (tmp_path / "ray-tmp").mkdir()
    done = subprocess.run([sys.executable, "-c", "import sys; from chute.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "convert", "imagefolder", str(src),
                           str(tmp_path / "dst"), "--engine", "ray", "--ray-address",
                           address], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_ADDRESS": "",
                               "RAY_TMPDIR": str(tmp_path / "ray-tmp")})
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and f"--ray-address {address}: no Ray cluster" in lines[0], \
        done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "dst").exists()


def _processes_with(marker: str) -> list[str]:
    """The processes whose environment holds `marker` (the driver's, inherited by every Ray
    process it started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        command = c.read().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{pid} {command[:80]}")
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("name", "moment"), [("SIGINT", "ray starting"),
                                              ("SIGINT", "tasks running"),
                                              ("SIGTERM", "tasks running")])
def test_a_signal_to_the_driver_alone_stops_the_convert_and_ray_and_removes_what_it_wrote(
        tmp_path, name, moment):
    """docs/ray.md, "Failures": a SIGINT or SIGTERM to the driver of a Ray convert, while Ray
    starts or while its tasks run, exits 130 in one line, leaves neither the lock nor the
    staging folder, and no Ray process (before: a crash in Ray's C++ core, or Ray's agents
    left running)."""
    import signal
    import time
    import uuid

    from tests._media import jpeg

    src = tmp_path / "src"
    for c in range(2):
        (src / f"class{c}").mkdir(parents=True)
        for i in range(300):
            (src / f"class{c}" / f"{i:03d}.jpg").write_bytes(jpeg(48, 40, seed=i % 7))
    marker = f"CHUTE_TEST_SIGNAL_{uuid.uuid4().hex}"
    driver = subprocess.Popen(
        # SIGINT as in a foreground terminal: a suite started as a background job (`&`)
        # passes SIGINT ignored, which the driver rightly keeps ignored (chute/ray/_signals.py)
        [sys.executable, "-c", "import signal, sys; from chute.cli import main; "
         "signal.signal(signal.SIGINT, signal.default_int_handler); "
         "sys.exit(main(sys.argv[1:]))", "convert", "imagefolder", str(src),
         str(tmp_path / "dst"), "--engine", "ray", "--task-size", "4", "--max-side", "16",
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_ADDRESS": "", marker: "1"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            if moment == "ray starting" and any("raylet" in p for p in _processes_with(marker)):
                break  # Ray's processes are starting
            if moment == "tasks running" and any(any(p.iterdir())
                                                 for p in tmp_path.glob(".dst.tmp-*")):
                break  # a task wrote a part
            time.sleep(0.05)
        driver.send_signal(getattr(signal, name))
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    assert err.strip() == "interrupted", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no lock, staging or dst
    deadline = time.monotonic() + 6  # shut down before the driver exits (orphans lived 10 s)
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(marker) == []
