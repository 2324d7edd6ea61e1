"""chute/_fork.py: a fork waits for the decode in flight (docs/design.md, "Processes and
threads"). A child forked while another thread was inside Numba's parallel decode (TBB) crashed
in its own first parallel decode, about 1 child in 200
(tests/pipelines/test_fork_safety.py failed so in CI)."""

import os
import threading
import time

import pytest

from chute._fork import ProcessLock

pytestmark = [pytest.mark.slow,  # forks processes (docs/testing.md)
              pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # fork with threads


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_fork_waits_until_no_other_thread_holds_the_lock():
    lock = ProcessLock(fork_waits=True)
    finished = []
    held = threading.Event()

    def hold():
        with lock:
            held.set()
            time.sleep(0.5)
            finished.append(True)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: what the holder had done when the fork happened
        os._exit(0 if finished else 3)
    thread.join()
    assert _exit_code(pid) == 0  # 3: forked while the other thread held the lock
    with lock:  # free again in the parent
        pass


def test_the_thread_holding_the_lock_may_fork_and_the_child_can_take_it():
    lock = ProcessLock(fork_waits=True)
    with lock:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                with lock:
                    code = 0
            finally:
                os._exit(code)
    assert _exit_code(pid) == 0
    with lock:
        pass


def test_the_lock_around_numbas_parallel_decode_is_one_a_fork_waits_for():
    from chute import _fork
    from chute.fallbacks import _decode

    assert _decode._lock in _fork.fork_waits_for()


def test_locks_are_taken_in_the_order_they_were_made_and_released_per_thread():
    from chute import _fork

    first, second = ProcessLock(fork_waits=True), ProcessLock(fork_waits=True)
    waits = _fork.fork_waits_for()
    assert waits.index(first) < waits.index(second)
    _fork._wait_before_fork()  # what os.fork runs first, from this thread
    try:
        assert first.locked() and second.locked()
        other = threading.Thread(target=_fork._release_after_fork)  # another thread's hook
        other.start()
        other.join()
        assert first.locked() and second.locked()  # it released nothing of this thread's
    finally:
        _fork._release_after_fork()
    assert not first.locked() and not second.locked()
