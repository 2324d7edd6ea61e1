"""Starting and closing a server: scripts without a __main__ guard, stages that cannot be
built, spawns that fail, and replica restarts interrupted half-way (issue 27, items 5 and 7)."""

import multiprocessing.context
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chute.infer import InferConfig, InferServer, StageConfig, StartupError, run_bulk
from chute.infer._replica_handle import HOLD_RESTART_ENV, ReplicaHandle

ROOT = Path(__file__).resolve().parents[2]


def _count_spawns(monkeypatch) -> list:
    spawned: list = []
    spawn = ReplicaHandle.spawn

    def counting(self):
        spawned.append((self.stage.name, self.index))
        spawn(self)

    monkeypatch.setattr(ReplicaHandle, "spawn", counting)
    return spawned


@pytest.mark.slow
def test_a_script_without_a_main_guard_fails_once_with_one_clear_line(tmp_path):
    script = tmp_path / "serve.py"
    script.write_text(
        "from chute.infer import InferConfig, InferServer, StageConfig, run_bulk\n"
        "config = InferConfig([StageConfig('a', 'tests.infer._stages:double', replicas=2),\n"
        "                      StageConfig('b', 'tests.infer._stages:double', replicas=2)])\n"
        "with InferServer(config) as server:\n"
        "    print(run_bulk(server, [1, 2], timeout=60).failed)\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 1
    err = done.stderr
    # the parent's one error; no replica tracebacks, no error from closing a half-started server
    assert err.count("Traceback") == 1, err
    assert "RuntimeError" not in err and "AttributeError" not in err, err
    last = err.strip().splitlines()[-1]
    # whichever first replica exits first is named (both stages' start at once)
    assert re.match(r"chute\.infer\._replica_handle\.StartupError: stage '[ab]': ", last), last
    assert str(script) in last and 'if __name__ == "__main__":' in last


@pytest.mark.slow
def test_a_stage_that_cannot_be_built_fails_once_before_the_other_replicas(monkeypatch,
                                                                           leak_check):
    spawned = _count_spawns(monkeypatch)
    config = InferConfig([
        StageConfig("ok", "tests.infer._stages:double", replicas=2),
        StageConfig("model", "tests.infer._stages:broken_factory", options={}, replicas=3)])
    with pytest.raises(StartupError) as caught:
        InferServer(config)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("stage 'model' (fn 'tests.infer._stages:broken_factory') cannot "
                              "be built: ZeroDivisionError: the model cannot be built (at "
                              "_stages.py:"), message
    assert "Traceback" in caught.value.remote_traceback
    assert spawned == [("ok", 0), ("model", 0)]  # not the four other replicas
    leak_check()


@pytest.mark.parametrize("fn", ["tests.infer.no_such_module:f", "missing.py:build"])
def test_a_stage_naming_no_module_or_file_fails_without_a_process(monkeypatch, fn):
    spawned = _count_spawns(monkeypatch)
    with pytest.raises(StartupError, match=r"stage 'x' cannot be built: stage fn .*(no module"
                                           r"|no file)"):
        InferServer(InferConfig([StageConfig("x", fn, replicas=4)]))
    assert spawned == []


def _failing_start(monkeypatch, fail_on: set[int]) -> list:
    """Makes the n-th process start (counted from 1) raise for n in `fail_on`."""
    starts: list = []
    start = multiprocessing.context.SpawnProcess.start

    def flaky(self):
        starts.append(self.name)
        if len(starts) in fail_on:
            raise OSError("the new process could not be started")
        start(self)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", flaky)
    return starts


@pytest.mark.slow
def test_a_start_that_fails_half_way_raises_its_own_error_and_stops_the_rest(monkeypatch,
                                                                            leak_check):
    _failing_start(monkeypatch, {2})
    config = InferConfig([StageConfig("a", "tests.infer._stages:double"),
                          StageConfig("b", "tests.infer._stages:double")])
    with pytest.raises(OSError, match="could not be started"):
        InferServer(config)  # closing the half-started server raised AssertionError
    leak_check()


@pytest.mark.slow
def test_a_restart_whose_start_fails_is_reported_and_retried(monkeypatch, leak_check):
    starts = _failing_start(monkeypatch, {3})  # two replicas start, the first restart fails
    config = InferConfig([StageConfig("pid", "tests.infer._stages:pid", replicas=2)])
    with InferServer(config) as server:
        handle = server.stages[0].replicas[0]
        victim = handle.process.pid
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while len(handle.pids) < 2 and time.monotonic() < deadline:  # retried a second later
            time.sleep(0.05)
        assert handle.thread.is_alive()  # the failed start did not end the replica's thread
        run = run_bulk(server, list(range(6)), timeout=60)
        pids, events = server.pids, list(server.events)
    assert len(starts) == 4 and run.failed == 0
    assert any("restart failed" in e and "could not be started" in e for e in events), events
    leak_check(pids)


@pytest.mark.slow
def test_closing_in_the_middle_of_a_restart_stops_the_new_process(tmp_path, monkeypatch,
                                                                   leak_check):
    held = tmp_path / "restarting"
    monkeypatch.setenv(HOLD_RESTART_ENV, str(held))
    config = InferConfig([StageConfig("pid", "tests.infer._stages:pid", replicas=2)])
    server = InferServer(config)
    try:
        os.kill(server.stages[0].replicas[0].process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not held.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held.exists(), "the restart was not reached"
        began = time.monotonic()
    finally:
        server.close()
    assert time.monotonic() - began < 15
    assert len(server.stages[0].replicas[0].pids) == 2  # the new process was spawned ...
    leak_check(server.pids)  # ... and stopped
