"""Several processes sharing one node cache under a limit (issue 37 item 9): 4 readers of a
dataset in object storage (moto's S3 server on loopback, tests/_s3.py), one cache a quarter
of the dataset's size, each reading one epoch, global shuffle and ShardWindows. Before the
fix each process pinned half the limit whatever the number of processes and kept its pins
while waiting for room: 3 of 4 failed with CacheFullError after the wait."""

from __future__ import annotations

import hashlib
import multiprocessing
import os

import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.readers import open_dataset

FIELDS = {"image": "bytes", "label": "int64"}
PROCESSES = 4


def _rows(n: int = 160) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"image": rng.integers(0, 255, 1500 + 17 * i, dtype=np.uint8).tobytes(),
             "label": i} for i in range(n)]


def _digest(images: dict[int, bytes]) -> str:
    h = hashlib.sha256()
    for i in sorted(images):
        h.update(images[i])
    return h.hexdigest()


def _read_epoch(url: str, cache: str, limit: int, order: str, seed: int, out) -> None:
    from chute import ShardWindows

    try:
        ds = open_dataset(url, cache_dir=cache, cache_limit=limit)
        if order == "windows":
            ids = ShardWindows(2).bind(ds).order(seed, 0)(np.arange(len(ds)))
        else:
            ids = np.random.default_rng(seed).permutation(len(ds))
        images = {}
        for i in ids:
            sample = ds[int(i)]
            assert sample["label"] == int(i)
            images[int(i)] = bytes(sample["image"])
        out.put((seed, "ok", len(images), _digest(images)))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put((seed, "failed", 0, f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow
@pytest.mark.parametrize("order", ["global", "windows"])
def test_four_processes_share_a_quarter_size_cache_for_an_epoch_each(s3, tmp_path,
                                                                      monkeypatch, order):
    server, bucket = s3
    rows = _rows()
    with ShardWriter(f"{bucket}/ds", FIELDS, shard_size="12KB") as writer:
        for row in rows:
            writer.write(row)
    probe = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "probe")
    shards = probe.manifest["shards"]
    total = sum(e["size"] for s in shards for e in s["files"].values())
    assert len(shards) >= 16
    limit = total // 4
    # a deadlock fails in seconds, not after the default 600 s wait
    monkeypatch.setenv("CHUTE_CACHE_WAIT_SECONDS", "8")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    cache = str(tmp_path / "shared-cache")
    procs = [ctx.Process(target=_read_epoch,
                         args=(f"{bucket}/ds", cache, limit, order, seed, out))
             for seed in range(PROCESSES)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=90) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    want = _digest({i: r["image"] for i, r in enumerate(rows)})
    failed = [r for r in results if r[1] != "ok"]
    assert failed == [], failed
    assert sorted(r[0] for r in results) == list(range(PROCESSES))
    assert all(r[2] == len(rows) and r[3] == want for r in results)
    usage = sum(p.stat().st_size for p in (tmp_path / "shared-cache").rglob("*")
                if p.is_file())
    assert usage <= limit


@pytest.mark.slow  # starts a child process
def test_the_processes_counted_are_the_live_ones_and_junk_in_procs_is_ignored(tmp_path):
    from chute.readers.storage._node_cache import NodeCache

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    cache = NodeCache(tmp_path / "c", limit=1 << 20)
    cache.attach()
    procs = tmp_path / "c" / ".procs"
    (procs / "123-00000000000000aa").write_text("")  # a process that died: no lock held
    (procs / "124-00000000000000bb").symlink_to(victim)  # never followed, never counted
    os.mkfifo(procs / "125-00000000000000cc")  # not a regular file: ignored, no hang
    (procs / "126-00000000000000dd").mkdir()
    (procs / "not-a-process").write_text("")
    assert cache.attached() == 1
    assert not (procs / "123-00000000000000aa").exists()
    assert victim.read_text() == "keep" and (procs / "not-a-process").exists()
    # another process's cache instance counts this one; a second instance here does not add
    again = NodeCache(tmp_path / "c", limit=1 << 20)
    again.attach()
    assert again.attached() == 1
    import subprocess
    import sys
    import time

    code = ("import sys; from chute.readers.storage._node_cache import NodeCache; "
            f"NodeCache({str(tmp_path / 'c')!r}, limit=1 << 20).attach(); "
            "print('attached', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "attached"
        time.sleep(1.1)  # the count is kept a second
        assert again.attached() == 2
    finally:
        child.communicate("", timeout=30)
    time.sleep(1.1)
    assert again.attached() == 1  # it exited: its lock file is free, and deleted
