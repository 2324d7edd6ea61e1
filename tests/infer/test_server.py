import os
import signal
import time

import numpy as np
import pytest
import torch

from chute.infer import (
    InferConfig,
    InferServer,
    StageConfig,
    VideoClipLoader,
    run_bulk,
    run_poisson,
    summarize,
)
from chute.infer._replica_handle import StartupError
from tests.infer.conftest import EXAMPLES

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

LOADER = {"num_frames": 8, "size": 32, "dtype": "float32", "threads": 1}


def _model_config(dataset) -> InferConfig:
    return InferConfig([
        StageConfig("decode", "chute.infer:VideoClipLoader", options=LOADER, replicas=2,
                    max_batch=2, max_wait_ms=20),
        StageConfig("model", "video_classifier.py:build", options={"seed": 3}, max_batch=4,
                    max_wait_ms=100, queue_size=16),
    ], dataset=str(dataset), base=str(EXAMPLES))


def test_every_output_is_the_model_on_its_own_clip(video_dataset, leak_check):
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        from video_classifier import build
    finally:
        sys.path.remove(str(EXAMPLES))
    ids = [3, 0, 2, 1, 1, 3, 0, 2, 2, 0, 3, 1]
    with InferServer(_model_config(video_dataset)) as server:
        run = run_bulk(server, ids, timeout=120)
        pids = server.pids
    assert run.complete and run.dropped == 0 and run.failed == 0
    assert [r.input for r in run.requests] == ids
    assert [r.id for r in run.requests] == sorted(r.id for r in run.requests)
    model, loader = build(seed=3), VideoClipLoader(video_dataset, **LOADER)
    with torch.no_grad():
        for r in run.requests:
            alone = model(loader([r.input])[0][None])[0]
            torch.testing.assert_close(r.output, alone, rtol=1e-4, atol=1e-4)
    # the model ran batches of more than one request, and the stages' clocks line up
    assert max(r.stages["model"].batch_size for r in run.requests) > 1
    for r in run.requests:
        d, m = r.stages["decode"], r.stages["model"]
        assert r.submitted <= d.enqueued <= d.batched <= d.started <= d.finished
        assert d.finished <= m.enqueued <= m.batched <= m.started <= m.finished <= r.done
    del run, r, alone
    leak_check(pids)


def test_a_failing_request_fails_alone_and_is_counted(leak_check):
    config = InferConfig([StageConfig("check", "tests.infer._stages:fail_on_three",
                                      max_batch=8, max_wait_ms=50)])
    with InferServer(config) as server:
        run = run_bulk(server, list(range(8)), timeout=60)
        report = summarize(run, server)
        pids = server.pids
    assert report["failed"] == 1 and report["completed"] == 7
    (bad,) = [r for r in run.requests if not r.ok]
    assert bad.input == 3 and "ValueError: input 3 is refused" in bad.error
    assert "stage check" in bad.error
    assert [float(r.output) for r in run.requests if r.ok] == [0, 1, 2, 4, 5, 6, 7]
    leak_check(pids)


def test_poisson_client_drops_when_the_first_queue_is_full():
    config = InferConfig([StageConfig("slow", "tests.infer._stages:slow", queue_size=1)])
    with InferServer(config) as server:
        run = run_poisson(server, list(range(12)), rate=100.0, seed=1, timeout=60)
        report = summarize(run, server)
    assert run.dropped > 0
    assert run.dropped + len(run.requests) == 12 == report["requests"]
    assert report["dropped"] == run.dropped and report["completed"] == len(run.requests)
    assert all(r.ok for r in run.requests)
    assert 0.5 < report["stages"]["slow"]["busy"] <= 1.0


def test_poisson_arrivals_follow_the_rate():
    config = InferConfig([StageConfig("double", "tests.infer._stages:double", max_batch=4,
                                      queue_size=64)])
    with InferServer(config) as server:
        run = run_poisson(server, list(range(40)), rate=80.0, seed=0, timeout=60)
    gaps = np.diff([r.submitted for r in run.requests])
    assert run.dropped == 0
    assert 0.5 / 80 < gaps.mean() < 2.0 / 80
    assert [float(r.output) for r in run.requests] == [2.0 * k for k in range(40)]


def test_a_killed_replica_is_reported_restarted_and_cleaned_up(leak_check):
    config = InferConfig([StageConfig("pid", "tests.infer._stages:pid", replicas=2)])
    with InferServer(config) as server:
        first = server.stages[0].replicas[0].process.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server.stages[0].restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        run = run_bulk(server, list(range(10)), timeout=60)
        pids = server.pids
        assert server.stages[0].restarts == 1
        assert any(f"pid {first}" in e and "restarting" in e for e in server.events)
        replacement = server.stages[0].replicas[0].process.pid
    assert replacement != first and set(pids) >= {first, replacement}
    assert run.failed == 0
    assert {int(r.output) for r in run.requests} <= set(pids) - {first}
    del run
    leak_check(pids)


def test_a_replica_killed_mid_run_fails_only_its_batch_and_the_run_goes_on(
        leak_check, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_TEST_MARKS", str(tmp_path))
    # the first batch is held until the kill; a wait of 5 s keeps its two requests together
    config = InferConfig([StageConfig("slow", "tests.infer._stages:held_once", max_batch=2,
                                      max_wait_ms=5000)])
    with InferServer(config) as server:
        victim = server.stages[0].replicas[0].process.pid
        first = [server.submit(k, block=True) for k in range(2)]
        deadline = time.monotonic() + 30
        while not (tmp_path / "held").exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the batch of two is running
        queued = [server.submit(k, block=True) for k in range(2, 6)]  # behind it, same replica
        os.kill(victim, signal.SIGKILL)
        assert server.wait(first + queued, 60)
        later = run_bulk(server, [6, 7], timeout=60)
        pids = server.pids
        events, restarts = list(server.events), server.stages[0].restarts
    assert all("replica 0 died while running a batch" in r.error for r in first)
    # the restarted replica serves what was queued and what comes later
    assert [float(r.output) for r in queued + later.requests] == [2, 3, 4, 5, 6, 7]
    assert restarts == 1 and server.failed == 2
    assert any(f"pid {victim}" in e and "died while running a batch" in e for e in events)
    leak_check(pids)


def test_factories_get_their_options_and_device():
    config = InferConfig([StageConfig("scale", "tests.infer._stages:make_scaler",
                                      options={"factor": 3.0}, max_batch=4)])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 2, 3], timeout=60)
    assert [float(r.output) for r in run.requests] == [3.0, 6.0, 9.0]


def test_a_stage_that_cannot_be_built_names_itself(leak_check):
    config = InferConfig([StageConfig("broken", "tests.infer._stages:no_such_thing")])
    with pytest.raises(StartupError, match="broken.*no_such_thing"):
        InferServer(config)
    leak_check()


def test_an_output_that_cannot_be_sent_fails_its_batch_not_the_replica():
    config = InferConfig([StageConfig("bad", "tests.infer._stages:unpicklable")])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 0], timeout=60)
        assert server.stages[0].restarts == 0
    assert "cannot be sent" in run.requests[0].error and run.requests[1].ok


def test_nested_outputs_leave_no_shared_memory_behind(leak_check):
    config = InferConfig([StageConfig("nested", "tests.infer._stages:nested", max_batch=2)])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 2, 3], timeout=60)
        pids = server.pids
    assert [float(r.output["x"][0][0]) for r in run.requests] == [1.0, 2.0, 3.0]
    leak_check(pids)  # while the outputs are still held


def test_a_sample_id_past_the_dataset_is_refused_at_submission(video_dataset):
    """docs/inference.md, "Requests" (issue 38 item 9): an id past the dataset raises when it
    is submitted, naming the dataset's size; before, it came back as a failed request (and
    `run_poisson(server, range(200))` on a 4-sample dataset failed 196 requests)."""
    config = InferConfig([StageConfig("decode", "chute.infer:VideoClipLoader",
                                      options=LOADER, max_batch=2)],
                         dataset=str(video_dataset))
    with InferServer(config) as server:
        for item in (4, -1, {"video": 99}):
            with pytest.raises(IndexError, match=r"out of range .*\(4 samples: ids 0 to 3\)"):
                server.submit(item, block=True)
        with pytest.raises(IndexError, match="sample id 4"):
            run_poisson(server, list(range(5)), rate=50.0)
        request = server.submit(3, block=True)
        server.wait([request])
        assert request.error is None and request.output.shape[1] == LOADER["num_frames"]
