"""A process forked while a Pipeline decodes (a DataLoader worker, a subprocess launcher) must be
able to decode: module locks and per-process decoder state are reset in the child."""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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


def wait_all(pids, deadline):
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


@contextlib.contextmanager
def decoding_pipeline(folder: Path) -> Iterator[Pipeline]:
    """A Pipeline on the cpu backend that another thread iterates while the block runs, its
    decoder compiled first (benchmarks/fork_stress.py uses it too)."""
    path = write_dataset(folder / "ds.chute", n=24, sizes=(300, 400), shard_size="1MiB")
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
    try:
        assert decoding.wait(120)
        yield pipe
    finally:
        stop.set()
        thread.join(60)
        pipe.close()


def fork_children(pipe, count: int) -> list[int]:
    """The pids of `count` children forked a few ms apart, each running `_child_decodes`
    (after a failure to fork, those started are waited for)."""
    pids: list[int] = []
    try:
        for k in range(count):
            time.sleep(0.01 + 0.003 * k)
            pid = os.fork()
            if pid == 0:  # the child: never return into the caller
                code = 1
                try:
                    code = _child_decodes(pipe, k)
                finally:
                    os._exit(code)
            pids.append(pid)
    except BaseException:
        wait_all(pids, time.monotonic() + DEADLINE_S)
        raise
    return pids


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: what we test
def test_children_forked_during_decoding_can_decode(tmp_path):
    with decoding_pipeline(tmp_path) as pipe:
        pids = fork_children(pipe, FORKS)
    codes = wait_all(pids, time.monotonic() + DEADLINE_S)
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
        assert wait_all([pid], time.monotonic() + DEADLINE_S) == [0]
        assert len([b for b in it]) == len(pipe) - 1  # the parent's pass is untouched


# Run in a fresh interpreter (so the parent's torch pool state is the script's own) that waits
# for its forked child at most CHILD_S seconds and then kills it: a hang fails, never blocks.
_TORCH_POOL_SCRIPT = r"""
import os, sys, time
import torch
from chute.pipelines import ImageOptions, Pipeline

pipe = Pipeline(sys.argv[1], 8, fields={"image": ImageOptions(size=224, backend="cpu",
                dtype="bfloat16"), "label": None}, device="cpu", rank=0, world_size=1)
x = torch.rand(1500, 1500)
(x @ x).to(torch.bfloat16)      # the parent uses torch's intra-op pool
next(iter(pipe))
pid = os.fork()
if pid == 0:
    code = 1
    try:
        batch = next(iter(pipe))  # a bfloat16 cast of 8x3x224x224 values: a parallel region
        big = torch.rand(1500, 1500).to(torch.bfloat16)
        ok = batch["image"].dtype == torch.bfloat16 and big.dtype == torch.bfloat16
        code = 0 if ok and torch.get_num_threads() == 1 else 2
    finally:
        os._exit(code)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status), "parent threads",
              torch.get_num_threads(), flush=True)
        pipe.close()
        os._exit(0)
    time.sleep(0.05)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("child hung", flush=True)
os._exit(0)
"""
CHILD_S = 15.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_after_torch_used_its_thread_pool_casts_to_bfloat16(tmp_path):
    import subprocess
    import sys

    path = write_dataset(tmp_path / "ds.chute", n=16, sizes=(240, 320), shard_size="1MiB")
    env = {**os.environ, "OMP_NUM_THREADS": "2"}  # the pool the parent uses, also on 1 core
    done = subprocess.run([sys.executable, "-c", _TORCH_POOL_SCRIPT, str(path), str(CHILD_S)],
                          capture_output=True, text=True, timeout=CHILD_S + 60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["child", "0", "parent", "threads", "2"], done.stdout
