"""Opening a dataset in object storage whose endpoint does not answer (issue 38 item 3): a new
process with every file of a version in the node cache opens it within seconds, saying so in
one line, and reads the same samples as the local copy; offline (`CHUTE_OFFLINE=1`,
`offline=True`) never asks the server; a 404 is still an error, never hidden by the cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from chute.readers import StorageError, open_dataset
from chute.readers.storage._object_store import Remote
from tests._s3 import FaultProxy
from tests.readers.storage.test_object_storage import samples, write

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cached(s3, tmp_path, monkeypatch):
    """A dataset in the bucket and a local copy; every file of it in the node cache (read
    through a proxy); yields (proxy, url, local copy, cache folder)."""
    server, bucket = s3
    rows = samples(40)
    write(f"{bucket}/ds", rows)
    write(tmp_path / "local", rows)
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "300")  # the default: no wait may reach it
    cache = tmp_path / "cache"
    ds = open_dataset(f"{bucket}/ds", cache_dir=cache)
    for i in range(len(ds)):
        ds[i]
    (cache / "fingerprint").write_text(ds.fingerprint)
    del ds
    yield proxy, f"{bucket}/ds", tmp_path / "local", cache
    proxy.close()


def images(ds) -> list[bytes]:
    return [bytes(ds[i]["image"]) for i in range(len(ds))]


@pytest.mark.slow
def test_a_new_process_opens_a_fully_cached_dataset_with_the_endpoint_down(cached):
    proxy, url, local, cache = cached
    proxy.set_down(True)  # connections refused
    script = textwrap.dedent(f"""
        import hashlib, time
        from chute.readers import open_dataset
        t0 = time.monotonic()
        ds = open_dataset({url!r}, cache_dir={str(cache)!r})
        print(ds.fingerprint)
        for i in range(len(ds)):
            print(hashlib.sha256(bytes(ds[i]["image"])).hexdigest(), ds[i]["label"])
        print(f"took {{time.monotonic() - t0:.1f}}")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    # the open and the reads (imports left out: up to 12 s on a loaded 2-core machine)
    took = float(done.stdout.splitlines()[-1].split()[1])
    assert took < 10, (took, done.stderr)
    want = open_dataset(local)
    import hashlib
    lines = done.stdout.splitlines()
    version = (cache / "fingerprint").read_text()
    assert lines[0] == version
    assert lines[1:-1] == [f"{hashlib.sha256(bytes(want[i]['image'])).hexdigest()} "
                           f"{want[i]['label']}" for i in range(len(want))]
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, done.stderr
    assert url in warnings[0] and version in warnings[0] and " UTC" in warnings[0]
    assert "did not answer" in warnings[0]


@pytest.mark.slow
def test_a_frozen_endpoint_costs_seconds_when_the_cache_holds_the_dataset(cached, capsys):
    proxy, url, local, cache = cached
    proxy.frozen = True  # connections accepted, never answered
    t0 = time.monotonic()
    ds = open_dataset(url, cache_dir=cache)
    assert time.monotonic() - t0 < 10
    assert images(ds) == images(open_dataset(local))
    err = capsys.readouterr().err
    assert f"reading version {ds.fingerprint} from the node cache" in err


def test_offline_never_asks_the_server(cached, monkeypatch, tmp_path):
    proxy, url, local, cache = cached
    proxy.frozen = True
    before = proxy.connections
    t0 = time.monotonic()
    ds = open_dataset(url, cache_dir=cache, offline=True)
    monkeypatch.setenv("CHUTE_OFFLINE", "1")
    again = open_dataset(url, cache_dir=cache)
    assert time.monotonic() - t0 < 3
    assert images(ds) == images(again) == images(open_dataset(local))
    assert proxy.connections == before
    with pytest.raises(StorageError, match=r"offline \(CHUTE_OFFLINE=1.*no complete version.*"
                                           r"unset CHUTE_OFFLINE") as info:
        open_dataset(url, cache_dir=tmp_path / "empty")
    assert "\n" not in str(info.value)
    assert proxy.connections == before


def test_a_missing_dataset_is_an_error_even_when_cached(cached):
    proxy, url, local, cache = cached
    Remote(url).delete(["chute.json"])  # a 404 is an answer: the cache must not hide it
    with pytest.raises(StorageError, match="not found"):
        open_dataset(url, cache_dir=cache)


def test_the_cache_limit_error_asks_for_what_reading_needs_not_more(s3, tmp_path, monkeypatch):
    # issue 38 item 5: it asked for two shards (4.11 MiB) where 3 MB trained fine
    from chute.readers import CacheFullError
    from chute.readers._sizes import parse_size

    server, bucket = s3
    monkeypatch.setenv("CHUTE_CACHE_WAIT_SECONDS", "2")
    rows = samples(40)
    write(f"{bucket}/ds", rows, shard_size="40KB")
    with pytest.raises(CacheFullError, match="raise it to at least") as info:
        open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c0", cache_limit=20_000)
    asked = parse_size(str(info.value).split("at least ")[1].split(" (")[0].replace(" ", ""))
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c1", cache_limit=asked)
    assert [bytes(ds[i]["image"]) for i in range(len(ds))] == [r["image"] for r in rows]
    # and it is not much more than needed: 8 KiB less (a fifth of a shard) cannot read it
    with pytest.raises(CacheFullError):
        short = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c2", cache_limit=asked - 8192)
        for i in range(len(short)):
            short[i]
