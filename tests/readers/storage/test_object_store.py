"""The object storage client's deadlines (issue 38 items 1-2, issue 37 item 8), against the
loopback S3 server through the fault proxy (tests/_s3.py): a server that accepts and never
answers ends by CHUTE_S3_RETRY_SECONDS, with lines on stderr while it lasts; a transfer that
breaks or stalls mid-body resumes where it stopped; a slow but steady one finishes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from chute.readers import StorageError
from chute.readers.storage import _object_store
from chute.readers.storage._object_store import Remote
from tests._s3 import FaultProxy

BLOB = np.random.default_rng(0).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()


@pytest.fixture
def proxied(s3, monkeypatch):
    """(proxy, Remote of the bucket through it, server); BLOB stored as `blob`."""
    server, bucket = s3
    Remote(bucket).put_bytes("blob", BLOB)
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    yield proxy, Remote(bucket), server
    proxy.close()


@pytest.mark.slow
def test_a_server_that_never_answers_fails_by_the_deadline_saying_so(proxied, monkeypatch,
                                                                      capsys, tmp_path):
    proxy, remote, _ = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "3")
    monkeypatch.setattr(_object_store, "_REPORT", 1.0)  # the 10 s of a real run, shortened
    proxy.frozen = True  # connections accepted, nothing sent back (SIGSTOP, a dead link)
    t0 = time.monotonic()
    with pytest.raises(StorageError) as info:
        remote.download("blob", tmp_path / "blob")
    took = time.monotonic() - t0
    # the deadline, not the client's 30 s default or the 120 s request timeout of round 3
    assert 2.5 < took < 8, took
    message = str(info.value)
    assert "\n" not in message and remote.where("blob") in message
    assert "failed for 3 s" in message and "CHUTE_S3_RETRY_SECONDS" in message
    lines = [line for line in capsys.readouterr().err.splitlines() if "failing for" in line]
    assert len(lines) >= 2, lines  # about one a second here: every 10 s in a real run
    assert all(remote.where("blob") in line and "until 3 s" in line and
               "CHUTE_S3_RETRY_SECONDS" in line for line in lines)
    assert not (tmp_path / "blob").exists() and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_refused_endpoint_says_so_while_it_retries(proxied, monkeypatch, capsys):
    proxy, remote, _ = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "3")
    monkeypatch.setattr(_object_store, "_REPORT", 1.0)
    proxy.set_down(True)
    with pytest.raises(StorageError, match="failed for 3 s"):
        remote.get_bytes("blob")
    lines = [line for line in capsys.readouterr().err.splitlines() if "failing for" in line]
    assert len(lines) >= 2 and remote.where("blob") in lines[0], lines


def test_a_connection_cut_mid_body_resumes_where_it_stopped(proxied, tmp_path):
    proxy, remote, _ = proxied
    proxy.cut_after = 2 << 20  # once, two thirds through the object
    before = proxy.forwarded
    remote.download("blob", tmp_path / "blob", size=len(BLOB))
    assert (tmp_path / "blob").read_bytes() == BLOB
    # a resumed transfer asks for the rest only; starting over would send 5 MiB
    assert proxy.forwarded - before < len(BLOB) + (256 << 10)


@pytest.mark.slow
def test_a_stall_mid_body_is_cut_and_resumed(proxied, tmp_path, monkeypatch):
    proxy, remote, _ = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "20")
    monkeypatch.setattr(_object_store, "_IDLE", 1.0)  # 30 s in a real run
    proxy.rate = 1 << 20  # 3 s for the object, so that it freezes mid-body
    threading.Timer(1.0, setattr, args=(proxy, "frozen", True)).start()
    threading.Timer(2.5, setattr, args=(proxy, "frozen", False)).start()
    before = proxy.forwarded
    t0 = time.monotonic()
    remote.download("blob", tmp_path / "blob", size=len(BLOB))
    assert time.monotonic() - t0 < 15
    assert (tmp_path / "blob").read_bytes() == BLOB
    assert proxy.connections >= 2  # the frozen connection was given up, another one resumed
    assert proxy.forwarded - before < len(BLOB) + (1 << 20)


@pytest.mark.slow
def test_a_slow_but_steady_download_longer_than_the_deadline_finishes(proxied, tmp_path,
                                                                      monkeypatch):
    proxy, remote, _ = proxied
    # the whole body takes about 4 s, longer than the deadline and the inactivity timeout:
    # only a wait without any byte counts against them
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "2")
    monkeypatch.setattr(_object_store, "_IDLE", 1.5)
    proxy.rate = 800_000
    t0 = time.monotonic()
    remote.download("blob", tmp_path / "blob", size=len(BLOB))
    assert time.monotonic() - t0 > 3
    assert (tmp_path / "blob").read_bytes() == BLOB
    assert proxy.connections == 1  # never cut: it never stopped


def test_a_write_into_a_missing_bucket_says_the_bucket_does_not_exist(s3):
    from chute.convert import ShardWriter

    with pytest.raises(StorageError) as info:
        with ShardWriter("s3://no-such-bucket-38/ds", {"image": "bytes"}) as writer:
            writer.write({"image": b"x"})
    message = str(info.value)
    assert "bucket 'no-such-bucket-38' does not exist; create it" in message
    assert "not found" not in message and "\n" not in message


@pytest.mark.slow
def test_a_server_answering_503_is_retried_saying_so(proxied, monkeypatch, capsys):
    proxy, remote, _ = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "3")
    monkeypatch.setattr(_object_store, "_REPORT", 1.0)
    proxy.status = 503  # throttled or overloaded: every request answered 503
    t0 = time.monotonic()
    with pytest.raises(StorageError, match="failed for 3 s") as info:
        remote.get_bytes("blob")
    assert time.monotonic() - t0 < 8 and "\n" not in str(info.value)
    lines = [line for line in capsys.readouterr().err.splitlines() if "failing for" in line]
    assert len(lines) >= 2 and "503" in lines[0] and remote.where("blob") in lines[0], lines
    proxy.status = None
    # the next request's first try after the outage is short (_GRACE): longer here, where a
    # loaded machine may take more than 0.5 s to receive the first bytes
    monkeypatch.setattr(_object_store, "_GRACE", 5.0)
    assert remote.get_bytes("blob") == BLOB  # and it answers again


@pytest.mark.slow
def test_a_request_right_after_an_outage_is_sent_to_the_server_that_is_back(proxied,
                                                                            monkeypatch):
    # the outage's deadline has passed when the next request begins, a moment after the last
    # failure: it must still be tried (it failed at once, never sent, before)
    proxy, remote, _ = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "1")
    proxy.status = 503
    with pytest.raises(StorageError, match="failed for 1 s"):
        remote.get_bytes("blob")
    proxy.status = None
    monkeypatch.setattr(_object_store, "_GRACE", 5.0)  # as above: a loaded machine is slow
    assert remote.get_bytes("blob") == BLOB
