"""Seeded, bounded faults on object storage (issue 37; docs/storage.md): chute's real client
talks to moto's S3 server on loopback through the fault proxy of tests/_s3.py. Each trial
attacks one surface:

- "write": a dataset written (fresh or `--overwrite`) while the proxy loses the reply to a
  conditional write of `chute.json` or `chute.writing` after the server applied it, or to a
  shard upload, or answers 500 to the uploads of a while;
- "read": a dataset opened and read whole with a fresh node cache while the proxy cuts a
  download, flips a byte of a shard or of the manifest in flight, loses a reply, stalls or
  throttles the link, or a shard's object is replaced by one 10 times its size (refused in
  one line, twice); then read again fault-free from the same cache (nothing damaged kept);
- "cache": the hostile node cache contents of tests/robustness/test_node_cache.py.

A last trial starts several processes reading one dataset through the proxy (bytes flipped in
flight) into one shared node cache under a limit of half the dataset.

Outcomes: "correct", "named" (a one-line chute error, with the URL still holding the old or
the new dataset whole), or a failure: "raw" (any other exception, or an error of several
lines), "hang" (over LIMIT_S), "wrong" (a byte delivered that is not the source's), "lost"
(the URL holding neither the old nor the new dataset whole; for "cache", a file outside the
cache touched). `pytest -s` prints the counts; CHUTE_ROBUSTNESS_SEED explores another seed,
CHUTE_ROBUSTNESS_S3 sets the count (CI runs 60)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import shutil
from collections import Counter

import pytest

from chute import errors
from chute.errors import ChuteError
from chute.readers import open_dataset
from chute.readers.storage._object_store import Remote
from tests._s3 import FaultProxy
from tests.convert.destination.test_write_lease import rows, writer
from tests.readers.storage.test_shared_cache_limit import _digest, _read_epoch
from tests.robustness._alarm import Hang, alarm
from tests.robustness.test_node_cache import assert_no_failures
from tests.robustness.test_node_cache import trial as cache_trial

pytestmark = pytest.mark.slow  # starts processes (shared_trial)

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = int(os.environ.get("CHUTE_ROBUSTNESS_S3", "60"))
LIMIT_S = 60
SHARED = 3  # processes sharing one cache in the last trial


def _read(url: str, cache) -> list[bytes]:
    ds = open_dataset(url, cache_dir=cache)
    return [bytes(ds[i]["image"]) for i in range(len(ds))]


def _holds(url: str, cache) -> list[bytes] | None:
    """The images at `url` read fault-free, None when no dataset can be read there."""
    try:
        return _read(url, cache)
    except ChuteError:
        return None


def _write(url: str, data: list[dict], overwrite: bool) -> None:
    with writer(url, overwrite=overwrite) as w:
        for row in data:
            w.write(row)


def _named(exc: BaseException) -> str:
    return "named" if isinstance(exc, ChuteError) and "\n" not in str(exc) else "raw"


def write_trial(rng: random.Random, proxy: FaultProxy, url: str, base) -> tuple[str, str]:
    prefix = url.split("/", 3)[3]
    old = rows(rng.randint(2, 5), rng.getrandbits(16)) if rng.random() < 0.5 else None
    new = rows(rng.randint(2, 6), rng.getrandbits(16))
    if old is not None:
        _write(url, old, False)
    fault = rng.choice(["lose manifest", "lose lease", "lose shard", "fail shards"])
    how = rng.choice(["drop", "500"])
    if fault == "lose manifest":
        proxy.lose_reply("PUT", rf"/{prefix}/chute\.json$", how=how)
    elif fault == "lose lease":
        proxy.lose_reply("PUT", rf"/{prefix}/chute\.writing$", nth=rng.randint(1, 2), how=how)
    elif fault == "lose shard":
        proxy.lose_reply("PUT", rf"/{prefix}/w[0-9a-f]+-[0-9]+/", nth=rng.randint(1, 3), how=how)
    else:
        proxy.lose_reply("PUT", rf"/{prefix}/w[0-9a-f]+-[0-9]+/", how=how, then_fail=True)
    outcome, lost = "correct", proxy.lost
    try:
        _write(url, new, old is not None)
    except Exception as exc:  # noqa: BLE001 - what the suite counts
        outcome = _named(exc)
    finally:
        proxy._rule, proxy.failing = None, None
    if proxy.lost == lost:
        fault += " (not reached)"
    held = _holds(url, base / "check")
    want_new = [r["image"] for r in new]
    if outcome == "correct" and held != want_new:
        outcome = "lost"
    elif outcome == "named" and held not in (
        want_new,
        None if old is None else [r["image"] for r in old],
    ):
        outcome = "lost"
    return fault, outcome


def read_trial(rng: random.Random, proxy: FaultProxy, url: str, base) -> tuple[str, str]:
    prefix = url.split("/", 3)[3]
    data = rows(rng.randint(3, 8), rng.getrandbits(16))
    _write(url, data, False)
    want = [r["image"] for r in data]
    fault = rng.choice(
        ["cut", "flip shard", "flip manifest", "lose get", "stall", "throttle", "oversized"]
    )
    if fault == "cut":
        proxy.cut_after = rng.randrange(1, 6000)
    elif fault == "flip shard":
        proxy.corrupt_reply("GET", rf"/{prefix}/w[0-9a-f]+-[0-9]+/", times=rng.randint(1, 3))
    elif fault == "flip manifest":
        proxy.corrupt_reply("GET", rf"/{prefix}/chute\.json", times=rng.randint(1, 2))
    elif fault == "lose get":
        proxy.lose_reply(
            "GET", rf"/{prefix}/", nth=rng.randint(1, 4), how=rng.choice(["drop", "500"])
        )
    elif fault == "throttle":  # a slow, steady link
        proxy.rate = 200_000
    elif fault == "stall":
        proxy.delay = 0.2
    else:  # a shard's object replaced in the bucket by one 10 times its size
        remote = Remote(url)
        name = rng.choice(sorted(n for n, _ in remote.list() if n.endswith("image.bin")))
        remote.put_bytes(name, remote.get_bytes(name) * 10)
    outcome, before = "correct", (proxy.lost, proxy.flipped)
    cache = base / "cache"
    try:
        if _read(url, cache) != want:
            outcome = "wrong"
    except Exception as exc:  # noqa: BLE001 - what the suite counts
        outcome = _named(exc)
    finally:
        reached = (
            (proxy.lost, proxy.flipped) != before
            or fault in ("stall", "throttle", "oversized")
            or (fault == "cut" and proxy.cut_after is None)
        )
        proxy._rule, proxy._flip, proxy.cut_after, proxy.delay = None, None, None, 0.0
        proxy.rate = None
    if fault == "oversized":  # the bucket no longer holds the dataset: refused, every time
        if outcome == "named":
            with contextlib.suppress(ChuteError):
                _read(url, cache)
                outcome = "wrong"
        return fault, outcome
    if not reached:
        fault += " (not reached)"
    try:  # fault-free, from the same cache: nothing damaged was kept
        if _read(url, cache) != want:
            outcome = "wrong"
    except Exception as exc:  # noqa: BLE001 - what the suite counts
        outcome = "raw" if _named(exc) == "raw" else "wrong"
    return fault, outcome


def shared_trial(proxy: FaultProxy, url: str, base) -> list[str]:
    """SHARED processes read one epoch each, global shuffle, into one cache half the
    dataset's size, with shard bytes flipped in flight (the proxy serves them all)."""
    prefix = url.split("/", 3)[3]
    data = rows(24, 7)
    _write(url, data, False)
    probe = open_dataset(url, cache_dir=base / "probe")
    total = sum(e["size"] for s in probe.manifest["shards"] for e in s["files"].values())
    proxy.corrupt_reply("GET", rf"/{prefix}/w[0-9a-f]+-[0-9]+/", times=4)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_read_epoch, args=(url, str(base / "shared"), total // 2, "global", seed, out)
        )
        for seed in range(SHARED)
    ]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=LIMIT_S) for _ in procs]
    except Exception:  # noqa: BLE001 - queue.Empty: a process hung
        results = []
    finally:
        proxy._flip = None
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    want = _digest({i: r["image"] for i, r in enumerate(data)})
    outcomes = []
    for k in range(SHARED):
        if k >= len(results):
            outcomes.append("hang")
        elif results[k][1] != "ok":
            if os.environ.get("CHUTE_ROBUSTNESS_SHOW"):
                print("shared", results[k][3][:300])
            kind, _, message = results[k][3].partition(": ")
            if kind == "CacheFullError":  # the limit holds what they need: waited in vain
                outcomes.append("hang")
            else:
                known = getattr(errors, kind, None)
                outcomes.append(
                    "named"
                    if isinstance(known, type)
                    and issubclass(known, ChuteError)
                    and "\n" not in message
                    else "raw"
                )
        else:
            outcomes.append(
                "correct" if results[k][2] == len(data) and results[k][3] == want else "wrong"
            )
    return outcomes


def test_object_storage_under_faults(s3, tmp_path, monkeypatch):
    server, bucket = s3
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "5")
    monkeypatch.setenv("CHUTE_CACHE_WAIT_SECONDS", "20")
    rng = random.Random(SEED)
    totals: Counter[str] = Counter()
    cases: Counter[str] = Counter()
    show = os.environ.get("CHUTE_ROBUSTNESS_SHOW")
    try:
        for k in range(COUNT):
            base = tmp_path / f"t{k}"
            base.mkdir()
            sub = random.Random(rng.getrandbits(64))
            surface = sub.choice(["write", "read", "cache"])
            url = f"{bucket}/t{k}"
            if surface == "cache":
                case, outcome = "hostile cache", cache_trial(sub, base)
            else:
                try:
                    with alarm(LIMIT_S):
                        case, outcome = (write_trial if surface == "write" else read_trial)(
                            sub, proxy, url, base
                        )
                except Hang:
                    case, outcome = surface, "hang"
            if show:
                print(k, surface, case, outcome)
            cases[f"{surface}: {case}"] += 1
            totals[outcome] += 1
            shutil.rmtree(base, ignore_errors=True)
        base = tmp_path / "shared"
        base.mkdir()
        for outcome in shared_trial(proxy, f"{bucket}/shared", base):
            cases["shared cache"] += 1
            totals[outcome] += 1
    finally:
        proxy.close()
    assert_no_failures("object storage", totals, f", {dict(sorted(cases.items()))}")
