"""A process forked while a Pipeline decodes (a DataLoader worker, a subprocess launcher) must be
able to decode: module locks and per-process decoder state are reset in the child."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from chute.fallbacks import decode_batch
from chute.pipelines import ImageOptions, Pipeline
from tests._media import jpeg
from tests.pipelines._pipeline_data import write_dataset

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

FORKS = 20
DEADLINE_S = 90.0


def _child_decodes(pipe, k: int) -> int:
    """In the child: decode one small JPEG, and (odd k) a pass of the parent's Pipeline; 0 when
    everything decoded."""
    payload = np.frombuffer(jpeg(32, 40, seed=3), np.uint8)
    out = np.zeros((1, 3, 8, 8), np.float32)
    status = decode_batch(payload, [0, payload.size], [[0, 0, 32, 40]], [False], out)
    if status[0] != 0 or not out.any():
        return 3
    if k % 2:
        batch = next(iter(pipe))
        if batch["image"].shape != (8, 3, 64, 64) or pipe.stats.decode_errors:
            return 4
    return 0


def _wait_all(pids, deadline):
    """Exit codes of pids (None for a child still running at the deadline, then killed)."""
    codes = {}
    while len(codes) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    for pid in pids:
        if pid not in codes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[pid] = None
    return [codes[p] for p in pids]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: what we test
def test_children_forked_during_decoding_can_decode(tmp_path):
    path = write_dataset(tmp_path / "ds.chute", n=24, sizes=(300, 400), shard_size="1MiB")
    image = ImageOptions(size=64, backend="cpu", dtype="float32")
    pipe = Pipeline(path, 8, fields={"image": image, "label": None}, device="cpu", rank=0,
                    world_size=1, prefetch=1)
    stop = threading.Event()
    decoding = threading.Event()

    def loop():
        while not stop.is_set():
            for _ in pipe:
                decoding.set()
                if stop.is_set():
                    break

    # The child's own decode call compiled here first: 20 children each compiling the Numba
    # kernels for it on 2 cores outlast the deadline without any lock involved.
    assert _child_decodes(pipe, 0) == 0
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    pids = []
    try:
        assert decoding.wait(120)
        for k in range(FORKS):
            time.sleep(0.01 + 0.003 * k)
            pid = os.fork()
            if pid == 0:  # the child: never return into pytest
                code = 1
                try:
                    code = _child_decodes(pipe, k)
                finally:
                    os._exit(code)
            pids.append(pid)
    finally:
        stop.set()
        codes = _wait_all(pids, time.monotonic() + DEADLINE_S)
        thread.join(60)
        pipe.close()
    assert codes == [0] * FORKS, f"children that hung (None) or failed: {codes}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_pass_started_before_the_fork_says_so_in_the_child(tmp_path):
    path = write_dataset(tmp_path / "ds.chute", n=24)
    with Pipeline(path, 4, fields={"image": ImageOptions(size=16, backend="cpu"), "label": None},
                  device="cpu", rank=0, world_size=1) as pipe:
        it = iter(pipe)
        next(it)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    next(it)
                except RuntimeError as exc:
                    code = 0 if "forked" in str(exc) else 2
                if code == 0 and len(list(pipe)) != len(pipe) - 1:  # a new pass continues
                    code = 3
            finally:
                os._exit(code)
        assert _wait_all([pid], time.monotonic() + DEADLINE_S) == [0]
        assert len([b for b in it]) == len(pipe) - 1  # the parent's pass is untouched
