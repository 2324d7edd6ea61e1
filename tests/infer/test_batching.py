import queue
import threading
import time
from types import SimpleNamespace

from chute.infer import StageConfig
from chute.infer._replica_handle import ReplicaHandle


def _handle(max_batch: int, max_wait_ms: float) -> ReplicaHandle:
    stage = SimpleNamespace(name="s", queue=queue.Queue(),
                            config=StageConfig("s", "m:f", max_batch=max_batch,
                                               max_wait_ms=max_wait_ms))
    return ReplicaHandle(stage, 0)


def test_without_a_wait_a_batch_takes_only_what_is_queued():
    handle = _handle(max_batch=4, max_wait_ms=0)
    for k in range(6):
        handle.stage.queue.put(k)
    assert handle._take() == [0, 1, 2, 3]  # max_batch
    assert handle._take() == [4, 5]
    assert handle._take() == []  # nothing queued: no batch


def test_a_batch_waits_up_to_max_wait_for_more_requests():
    handle = _handle(max_batch=4, max_wait_ms=150)
    handle.stage.queue.put("a")
    started = time.monotonic()
    assert handle._take() == ["a"]  # nobody came: a smaller batch after the wait
    assert time.monotonic() - started >= 0.15


def test_requests_arriving_within_the_wait_join_the_batch_and_a_full_one_goes_at_once():
    handle = _handle(max_batch=2, max_wait_ms=10_000)
    handle.stage.queue.put("a")
    threading.Timer(0.05, handle.stage.queue.put, ["b"]).start()
    started = time.monotonic()
    assert handle._take() == ["a", "b"]
    assert time.monotonic() - started < 5.0  # full: it did not sit out the 10 s wait
