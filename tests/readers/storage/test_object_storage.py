"""Datasets in object storage (issue 23), against moto's S3 server on loopback (tests/_s3.py)
through chute's real client over HTTP: writing (shards as they finish, manifest last),
reading through the node cache (same samples as a local copy), the cache's limit, pins and
versions, and what a user meets on a bad URL or missing credentials."""

from __future__ import annotations

import os
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.errors import ChuteError, FormatError
from chute.readers import StorageError, open_dataset, verify_dataset
from chute.readers.storage._node_cache import NodeCache
from chute.readers.storage._object_store import Remote

FIELDS = {"image": "bytes", "label": "int64", "z": "ndarray", "meta": "json"}


def samples(n: int = 60, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"image": rng.integers(0, 255, 2000 + 13 * i, dtype=np.uint8).tobytes(),
             "label": i % 7, "z": rng.standard_normal((3, 4)).astype(np.float32),
             "meta": {"key": f"s{i}"}} for i in range(n)]


def write(dest, rows, shard_size="20KB", **kw) -> None:
    with ShardWriter(dest, FIELDS, shard_size=shard_size, **kw) as writer:
        for row in rows:
            writer.write(row)


def cache_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def assert_same(remote_ds, local_ds) -> None:
    assert len(remote_ds) == len(local_ds)
    for i in range(len(local_ds)):
        a, b = remote_ds[i], local_ds[i]
        assert bytes(a["image"]) == bytes(b["image"])
        assert a["label"] == b["label"] and a["meta"] == b["meta"]
        np.testing.assert_array_equal(a["z"], b["z"])


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_written_to_s3_reads_back_exactly_as_the_local_copy(s3, tmp_path):
    server, bucket = s3
    rows = samples()
    write(f"{bucket}/ds", rows)
    write(tmp_path / "local", rows)
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "cache")
    local = open_dataset(tmp_path / "local")
    assert ds.url == f"{bucket}/ds" and ds.fingerprint != ""
    assert len(ds.manifest["shards"]) > 3  # several shards, each uploaded on its own
    assert_same(ds, local)
    ids = np.array([5, 0, 59, 17, 33])
    np.testing.assert_array_equal(ds.read("z", ids), local.read("z", ids))
    data, offsets = ds.gather(ids)
    assert bytes(data[offsets[2]:offsets[3]]) == rows[59]["image"]
    # another process (a DDP rank, a worker) reopens it from the pickled identity
    again = pickle.loads(pickle.dumps(ds))
    assert bytes(again[7]["image"]) == rows[7]["image"]


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_the_manifest_is_uploaded_last_and_old_versions_are_cleaned_up(s3, tmp_path):
    server, bucket = s3
    remote = Remote(f"{bucket}/ds")
    order: list[str] = []
    put_file, put_bytes = Remote.put_file, Remote.put_bytes

    def spy_file(self, name, path):
        order.append(name)
        put_file(self, name, path)

    def spy_bytes(self, name, data, **conditions):
        order.append(name)
        return put_bytes(self, name, data, **conditions)

    mp = pytest.MonkeyPatch()
    mp.setattr(Remote, "put_file", spy_file)
    mp.setattr(Remote, "put_bytes", spy_bytes)
    try:
        write(f"{bucket}/ds", samples(30))
    finally:
        mp.undo()
    assert order[-1] == "chute.json" and len(order) > 4
    first = {n for n, _ in remote.list()}
    write(f"{bucket}/ds", samples(40, seed=1), overwrite=True)
    second = {n for n, _ in remote.list()}
    assert not (first - {"chute.json"}) & second  # the old version's shards are gone
    assert len(open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")) == 40


@pytest.mark.slow
def test_an_interrupted_write_leaves_the_old_dataset_whole(s3, tmp_path):
    server, bucket = s3
    write(f"{bucket}/ds", samples(30))
    before = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c1")
    with pytest.raises(RuntimeError, match="interrupted"):
        with ShardWriter(f"{bucket}/ds", FIELDS, shard_size="10KB", overwrite=True) as writer:
            for i, row in enumerate(samples(40, seed=2)):
                writer.write(row)
                if i == 25:  # several new shards are uploaded by now
                    raise RuntimeError("interrupted")
    after = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c2")
    assert after.fingerprint == before.fingerprint
    assert_same(after, before)
    assert verify_dataset(f"{bucket}/ds") == []


def test_refuses_to_overwrite_without_being_asked_and_a_foreign_prefix(s3):
    server, bucket = s3
    write(f"{bucket}/ds", samples(5))
    with pytest.raises(ChuteError, match="already holds a chute dataset.*overwrite"):
        write(f"{bucket}/ds", samples(5))
    Remote(bucket).put_bytes("other/notes.txt", b"hello")
    with pytest.raises(ChuteError, match="not a chute dataset.*notes.txt.*empty prefix"):
        write(f"{bucket}/other", samples(5))
    assert Remote(bucket).get_bytes("other/notes.txt") == b"hello"


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_verify_finds_a_damaged_object(s3, tmp_path):
    server, bucket = s3
    write(f"{bucket}/ds", samples(20))
    assert verify_dataset(f"{bucket}/ds") == []
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    shard = ds.manifest["shards"][1]
    name = f"ds/{shard['name']}/image.bin"
    data = bytearray(Remote(bucket).get_bytes(name))
    data[10] ^= 0xFF
    Remote(bucket).put_bytes(name, bytes(data))
    problems = verify_dataset(f"{bucket}/ds")
    assert len(problems) == 1 and name in problems[0] and "checksum mismatch" in problems[0]


def test_a_corrupted_download_is_detected_and_never_delivered(s3, tmp_path):
    server, bucket = s3
    rows = samples(20)
    write(f"{bucket}/ds", rows)
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    shard = ds.manifest["shards"][0]
    name = f"ds/{shard['name']}/image.bin"
    data = bytearray(Remote(bucket).get_bytes(name))
    data[3] ^= 0x01  # same size, other bytes: only the checksum can tell
    Remote(bucket).put_bytes(name, bytes(data))
    with pytest.raises(StorageError, match="checksum .* differs from the manifest"):
        ds[0]
    assert not list((tmp_path / "c").rglob("image.bin"))  # nothing half-checked is kept


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_a_second_epoch_needs_no_server_when_the_cache_holds_the_dataset(s3, tmp_path):
    server, bucket = s3
    rows = samples(30)
    write(f"{bucket}/ds", rows)
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    first = [bytes(ds[i]["image"]) for i in range(len(ds))]
    state = pickle.dumps(ds)
    server.stop()
    try:
        ds.close()  # drops every map: the next read maps the cached files again
        assert [bytes(ds[i]["image"]) for i in range(len(ds))] == first
        again = pickle.loads(state)  # a reopen from the cached manifest, no request
        assert bytes(again[3]["image"]) == rows[3]["image"]
    finally:
        server.start()


@pytest.mark.slow
def test_a_missing_dataset_and_bad_credentials_are_one_clear_error(s3, tmp_path, monkeypatch):
    server, bucket = s3
    with pytest.raises(StorageError, match=r"s3://.*/nothing/chute.json: not found.*check the "
                                           r"URL"):
        open_dataset(f"{bucket}/nothing", cache_dir=tmp_path / "c")
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist; create"):
        open_dataset("s3://no-such-bucket-here/ds", cache_dir=tmp_path / "c")
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    t0 = time.monotonic()
    with pytest.raises(StorageError, match="failed for 1 s.*check that the endpoint"):
        open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    assert time.monotonic() - t0 < 30


def test_settings_come_from_the_aws_config_files(s3, tmp_path, monkeypatch):
    server, bucket = s3
    write(f"{bucket}/ds", samples(5))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(var)
    (tmp_path / "config").write_text(f"[profile lab]\nregion = us-east-1\n"
                                     f"endpoint_url = {server.endpoint}\n")
    (tmp_path / "credentials").write_text("[lab]\naws_access_key_id = a\n"
                                          "aws_secret_access_key = b\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert len(open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")) == 5


def test_local_datasets_refuse_cache_options(tmp_path):
    write(tmp_path / "local", samples(3))
    with pytest.raises(ValueError, match="cache_dir, cache_limit and offline are for datasets in "):
        open_dataset(tmp_path / "local", cache_limit="1GB")


# -- the node cache ------------------------------------------------------------------------

@pytest.mark.slow
def test_the_cache_stays_under_its_limit_and_reads_every_sample(s3, tmp_path):
    server, bucket = s3
    rows = samples(80)
    write(f"{bucket}/ds", rows, shard_size="16KB")
    payload = sum(e["size"] for s in open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "probe")
                  .manifest["shards"] for e in s["files"].values())
    cache = tmp_path / "c"
    ds = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=payload // 3)
    largest = max(e["size"] for s in ds.manifest["shards"] for e in s["files"].values())
    peak = 0
    for i in range(len(ds)):
        assert bytes(ds[i]["image"]) == rows[i]["image"]
        peak = max(peak, cache_bytes(cache))
    assert peak <= payload // 3 + largest
    # a second pass reads it all again (evicted shards are fetched again)
    assert all(bytes(ds[i]["image"]) == rows[i]["image"] for i in range(len(ds)))


def test_a_pinned_file_is_never_evicted(tmp_path):
    cache = NodeCache(tmp_path, limit=400)  # one 200-byte file plus the listing and total
    folder = tmp_path / "x" / "v"
    folder.mkdir(parents=True)
    (folder / ".payload").write_text("a.bin\nb.bin\n")

    def put(name: str, data: bytes):
        def download(temp: Path) -> None:
            temp.write_bytes(data)
            os.replace(temp, folder / name)
        return download

    pin = cache.pin(folder / "a.bin")
    cache.fetch(put("a.bin", b"a" * 200), folder / "a.bin", 200)
    assert not cache.fetch(put("b.bin", b"b" * 200), folder / "b.bin", 200, wait=False)
    assert (folder / "a.bin").exists() and not (folder / "b.bin").exists()
    cache.unpin(pin)
    assert cache.fetch(put("b.bin", b"b" * 200), folder / "b.bin", 200, wait=False)
    assert not (folder / "a.bin").exists()  # evicted once let go


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_eight_ranks_asking_at_once_download_each_file_once(s3, tmp_path, monkeypatch):
    server, bucket = s3
    write(f"{bucket}/ds", samples(40))
    calls: list[str] = []
    lock = threading.Lock()
    download = Remote.download

    def counted(self, name, *args, **kwargs):
        with lock:
            calls.append(name)
        time.sleep(0.01)
        return download(self, name, *args, **kwargs)

    monkeypatch.setattr(Remote, "download", counted)
    cache = tmp_path / "c"
    datasets = [open_dataset(f"{bucket}/ds", cache_dir=cache) for _ in range(8)]
    calls.clear()
    threads = [threading.Thread(target=lambda d=d: [d[i] for i in range(len(d))])
               for d in datasets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == len(set(calls)) == 2 * len(datasets[0].manifest["shards"])  # image, z


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_a_changed_dataset_never_reads_the_old_versions_cache(s3, tmp_path):
    server, bucket = s3
    write(f"{bucket}/ds", samples(20, seed=0))
    old = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    [old[i] for i in range(len(old))]
    rows = samples(20, seed=5)  # same sizes and shard names' pattern, other bytes
    write(f"{bucket}/ds", rows, overwrite=True)
    new = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    assert new.fingerprint != old.fingerprint and new.path != old.path
    assert all(bytes(new[i]["image"]) == rows[i]["image"] for i in range(len(new)))
    with pytest.raises(FormatError, match="changed since it was opened"):
        from chute.readers import Dataset

        Dataset.remote(f"{bucket}/ds", cache_dir=tmp_path / "other", fingerprint=old.fingerprint)


def test_a_limit_smaller_than_one_shard_is_refused_at_once(s3, tmp_path):
    from chute.readers import CacheFullError

    server, bucket = s3
    write(f"{bucket}/ds", samples(40), shard_size="40KB")
    t0 = time.monotonic()
    with pytest.raises(CacheFullError, match="cache_limit .* cannot hold .* raise it to at least"):
        open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c", cache_limit=20_000)
    assert time.monotonic() - t0 < 10


@pytest.mark.slow
def test_an_old_version_no_process_has_open_is_evicted_indices_and_all(s3, tmp_path):
    import gc

    from chute.readers.format._manifest import MANIFEST

    server, bucket = s3
    write(f"{bucket}/ds", samples(40, seed=0), shard_size="16KB")
    probe = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "probe")
    listed = {f"{s['name']}/{f}": e["size"] for s in probe.manifest["shards"]
              for f, e in s["files"].items()}
    small = sum(n for f, n in listed.items() if not f.endswith(".bin"))
    limit = sum(listed.values()) + small // 2  # one version and a half of its indices
    cache = tmp_path / "c"
    old = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=limit)
    [old[i] for i in range(len(old))]
    old_folder = Path(old.path)
    kept = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=limit)
    del old
    gc.collect()
    rows = samples(40, seed=5)
    write(f"{bucket}/ds", rows, shard_size="16KB", overwrite=True)
    new = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=limit)
    # both versions' indices plus the new payload do not fit: payload files are evicted,
    # never the indices of the old version `kept` has open
    assert all(bytes(new[i]["image"]) == rows[i]["image"] for i in range(len(new)))
    assert (old_folder / MANIFEST).exists()
    del kept
    gc.collect()
    new.close()
    assert all(bytes(new[i]["image"]) == rows[i]["image"] for i in range(len(new)))
    assert not (old_folder / MANIFEST).exists()  # no one has it open: its files went first
    assert cache_bytes(cache) <= limit + max(listed.values())
