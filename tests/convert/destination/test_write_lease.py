"""Two writers to one s3:// destination (docs/storage.md, "Writing to s3://"), against moto's
S3 server on loopback through chute's real client: the second fails with one line and the
first one's dataset stays whole, whether the second starts while the first holds the lease,
ignores the lease, or finds the first one stalled past the lease's time."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.convert.destination._write_lease import LEASE
from chute.errors import ChuteError
from chute.readers import open_dataset
from chute.readers.storage._object_store import Remote

FIELDS = {"image": "bytes", "label": "int64"}


def rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"image": rng.integers(0, 255, 3000, dtype=np.uint8).tobytes(), "label": i}
            for i in range(n)]


def writer(url: str, **kw) -> ShardWriter:
    return ShardWriter(url, FIELDS, shard_size="8KB", **kw)


def assert_holds(url: str, expected: list[dict], cache) -> None:
    ds = open_dataset(url, cache_dir=cache)
    assert [bytes(ds[i]["image"]) for i in range(len(ds))] == [r["image"] for r in expected]


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_a_second_writer_while_the_first_writes_fails_at_once(s3, tmp_path):
    server, bucket = s3
    url = f"{bucket}/ds"
    first, second = rows(20, 0), rows(20, 1)
    w1 = writer(url)
    for row in first[:10]:
        w1.write(row)  # some shards uploaded already
    with pytest.raises(ChuteError, match=r"another writer \(pid \d+ on .*\) is writing this "
                                         r"dataset .*lease .*chute.writing") as info:
        writer(url, overwrite=True)
    assert "\n" not in str(info.value)
    for row in first[10:]:
        w1.write(row)
    w1.close()
    assert_holds(url, first, tmp_path / "c1")
    assert LEASE not in dict(Remote(url).list())  # released when done
    with writer(url, overwrite=True) as w2:  # one after the other is fine
        for row in second:
            w2.write(row)
    assert_holds(url, second, tmp_path / "c2")


def test_a_writer_that_ignored_the_lease_keeps_its_dataset_the_other_fails_at_commit(
        s3, tmp_path, monkeypatch):
    server, bucket = s3
    url = f"{bucket}/ds"
    first, second = rows(20, 0), rows(12, 1)
    w1 = writer(url)
    for row in first[:10]:
        w1.write(row)
    monkeypatch.setenv("CHUTE_S3_CONDITIONAL_WRITES", "0")  # a writer without the lease
    with writer(url) as w2:
        for row in second:
            w2.write(row)
    monkeypatch.delenv("CHUTE_S3_CONDITIONAL_WRITES")
    for row in first[10:]:
        w1.write(row)
    with pytest.raises(ChuteError, match="another writer published a dataset here while this "
                                         "one was writing; this write was abandoned"):
        w1.close()
    assert_holds(url, second, tmp_path / "c")
    names = {n for n, _ in Remote(url).list()}
    manifest = json.loads(Remote(url).get_bytes("chute.json"))
    listed = {f"{s['name']}/{f}" for s in manifest["shards"] for f in s["files"]}
    assert names - {"chute.json"} == listed  # the abandoned write's shards are removed


@pytest.mark.slow
def test_a_stalled_writer_loses_the_lease_after_its_time_and_the_new_one_wins(
        s3, tmp_path, monkeypatch):
    server, bucket = s3
    url = f"{bucket}/ds"
    monkeypatch.setenv("CHUTE_S3_LEASE_SECONDS", "1")
    first, second = rows(20, 0), rows(16, 1)
    w1 = writer(url)
    for row in first[:10]:
        w1.write(row)
    lease = w1._remote._lease
    lease._stop.set()  # the writer stalls: no renewal for longer than the lease lasts
    lease._thread.join()
    time.sleep(2.5)
    with writer(url) as w2:  # takes the expired lease over
        for row in second:
            w2.write(row)
    for row in first[10:]:
        w1.write(row)
    with pytest.raises(ChuteError, match="lost its lease .*another writer took it over"):
        w1.close()
    assert_holds(url, second, tmp_path / "c")


@pytest.mark.slow
def test_a_lease_left_by_a_writer_that_died_expires(s3, tmp_path, monkeypatch):
    server, bucket = s3
    url = f"{bucket}/ds"
    Remote(url).put_bytes(LEASE, json.dumps({"token": "dead", "host": "gone", "pid": 1,
                                              "since": "then"}).encode())
    with pytest.raises(ChuteError, match=r"another writer \(pid 1 on gone since then\)"):
        writer(url)  # the default lease time: fresh however slow the requests
    monkeypatch.setenv("CHUTE_S3_LEASE_SECONDS", "1")
    time.sleep(2.5)
    with writer(url) as w:
        for row in rows(5, 0):
            w.write(row)
    assert_holds(url, rows(5, 0), tmp_path / "c")


def test_a_writer_whose_lease_was_deleted_by_hand_stops_without_publishing(s3, tmp_path):
    server, bucket = s3
    url = f"{bucket}/ds"
    w = writer(url)
    for row in rows(10, 0):
        w.write(row)
    Remote(url).delete([LEASE])
    with pytest.raises(ChuteError, match="lost its lease .*was deleted by hand"):
        w.close()
    assert not list(Remote(url).list())  # its shards removed, nothing published
