"""Writing a dataset to s3:// when replies are lost and writers die (docs/storage.md, "Writing
to s3://"), against moto's S3 server on loopback through chute's real client and a proxy that
forwards a chosen request, then loses its reply (a reset, or a 500 in its place): the retry is
refused by the write's own effect, and chute must read the object back before concluding that
another writer won. Ten trials each for the manifest (`chute.json`) and the lease
(`chute.writing`, taken and renewed), fresh and `--overwrite`: the URL holds the new dataset,
and the lease is gone (the next writer is not locked out)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from chute.errors import ChuteError
from chute.readers.storage._object_store import Remote, StorageError
from tests._s3 import FaultProxy
from tests.convert.destination.test_write_lease import assert_holds, rows, writer

TRIALS = 10


@pytest.fixture
def proxied(s3, monkeypatch):
    """(proxy, "s3://BUCKET") with chute's client going through the proxy."""
    server, bucket = s3
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    yield proxy, bucket
    proxy.close()


def write(url: str, data: list[dict], overwrite: bool) -> None:
    with writer(url, overwrite=overwrite) as w:
        for row in data:
            w.write(row)


def names_at(url: str) -> set[str]:
    return {n for n, _ in Remote(url).list()}


def listed(url: str) -> set[str]:
    manifest = json.loads(Remote(url).get_bytes("chute.json"))
    return {f"{s['name']}/{f}" for s in manifest["shards"] for f in s["files"]}


def lose_and_write(proxy: FaultProxy, bucket: str, tmp_path, trial: int, obj: str,
                   nth: int) -> None:
    how = ("drop", "500")[trial % 2]
    overwrite = bool(trial // 2 % 2)
    url = f"{bucket}/ds{trial}"
    old, new = rows(3, trial), rows(4, 100 + trial)
    if overwrite:
        write(url, old, False)
    proxy.lose_reply("PUT", rf"/ds{trial}/{obj}$", nth=nth, how=how)
    write(url, new, overwrite)
    assert proxy.lost == 1  # the fault happened
    assert_holds(url, new, tmp_path / "c")
    # no lease left (the next writer is not locked out), nothing left of the old dataset
    assert names_at(url) == listed(url) | {"chute.json"}


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_lost_reply_to_the_manifest_upload_keeps_the_new_dataset(proxied, tmp_path, trial):
    proxy, bucket = proxied
    lose_and_write(proxy, bucket, tmp_path, trial, r"chute\.json", 1)


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_lost_reply_to_the_lease_keeps_the_writer_going(proxied, tmp_path, trial):
    proxy, bucket = proxied
    # the 1st PUT of the lease takes it (If-None-Match), the 2nd renews it before the manifest
    lose_and_write(proxy, bucket, tmp_path, trial, r"chute\.writing", 1 + trial // 4 % 2)


def test_another_writers_manifest_is_still_a_conflict_after_a_lost_reply(
        proxied, tmp_path, monkeypatch):
    """The read-back does not mistake another writer's manifest for this one's."""
    proxy, bucket = proxied
    url = f"{bucket}/ds"
    second = rows(6, 1)
    w1 = writer(url)
    w1.write(rows(1, 0)[0])
    with monkeypatch.context() as env:  # a writer without the lease publishes meanwhile
        env.setenv("CHUTE_S3_CONDITIONAL_WRITES", "0")
        write(url, second, False)
    proxy.lose_reply("PUT", r"/ds/chute\.json$", how="500")  # refused with 412, not applied
    with pytest.raises(ChuteError, match="another writer published a dataset here"):
        w1.close()
    assert proxy.lost == 1
    assert_holds(url, second, tmp_path / "c")
    assert names_at(url) == listed(url) | {"chute.json"}


@pytest.mark.slow  # waits out two short retry deadlines
def test_a_manifest_upload_of_unknown_outcome_deletes_nothing_it_lists(
        proxied, tmp_path, monkeypatch):
    """The manifest is applied, its reply lost, and nothing about it is answered until the
    deadline: the write fails, the new dataset it may have published stays whole."""
    proxy, bucket = proxied
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "2")
    url = f"{bucket}/ds"
    proxy.lose_reply("PUT", r"/ds/chute\.json$", then_fail=True)
    with pytest.raises(StorageError, match=r"/ds/chute\.json: upload failed for 2 s"):
        write(url, rows(4, 0), False)
    proxy.failing = None  # the endpoint answers again
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "20")  # past the outage's deadline
    assert_holds(url, rows(4, 0), tmp_path / "c")


def test_a_refusal_that_cannot_be_read_back_is_not_taken_for_a_conflict(
        proxied, tmp_path, monkeypatch):
    """The manifest is applied, its reply lost, the retry refused (412), and the object cannot
    be read back: the outcome is unknown, so the write fails saying so and deletes nothing the
    manifest lists."""
    proxy, bucket = proxied
    url = f"{bucket}/ds"
    w = writer(url)
    for row in rows(4, 0):
        w.write(row)
    head = Remote.head

    def unreadable(self, name):
        if name == "chute.json":
            raise StorageError(f"{self.where(name)}: metadata request failed for 20 s (test)")
        return head(self, name)

    proxy.lose_reply("PUT", r"/ds/chute\.json$")
    with monkeypatch.context() as patch:
        patch.setattr(Remote, "head", unreadable)
        with pytest.raises(StorageError, match=r"chute\.json: the upload was refused as changed "
                                               r"meanwhile and could not be read back .*unknown"):
            w.close()
    assert proxy.lost == 1
    assert_holds(url, rows(4, 0), tmp_path / "c")


def test_an_overwrite_that_skips_nothing_removes_the_old_skipped_report(s3, tmp_path):
    server, bucket = s3
    url = f"{bucket}/ds"
    write(url, rows(5, 0), False)
    Remote(url).put_bytes("skipped.tsv", b"path\treason\nbad.jpg\tnot an image\n")
    write(url, rows(6, 1), True)
    assert names_at(url) == listed(url) | {"chute.json"}


_NO_PID = 1 << 22  # above the largest pid_max Linux allows: no process has it


def test_staging_folders_of_dead_writers_are_removed_by_the_next_write(
        s3, tmp_path, monkeypatch):
    server, bucket = s3
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    dead = temp / f"chute-upload-{_NO_PID + 1}-abc"
    live = temp / f"chute-upload-{os.getpid()}-abc"  # a write of this process, in progress
    locked = temp / f"chute-upload-{_NO_PID + 2}-def"  # a live writer in another pid namespace
    other = temp / "chute-upload-xyz"  # not a name of this version: left alone
    for folder in (dead, live, locked, other):
        (folder / "w0-00000").mkdir(parents=True)
        (folder / "w0-00000" / "data.bin").write_bytes(b"x" * 100)
    import fcntl

    fd = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        write(f"{bucket}/ds", rows(5, 0), False)
    finally:
        os.close(fd)
    assert sorted(p.name for p in temp.iterdir()) == sorted(
        p.name for p in (live, locked, other))  # and the write's own folder is gone


@pytest.mark.slow  # starts a process
def test_a_write_stopped_by_sigterm_removes_its_staging_folder_objects_and_lease(
        s3, tmp_path):
    server, bucket = s3
    url = f"{bucket}/ds"
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = textwrap.dedent(f"""
        import itertools
        from tests.convert.destination.test_write_lease import rows, writer
        data = rows(10, 0)
        with writer({url!r}) as w:
            for k in itertools.count():  # uploading shards when the signal comes
                w.write(data[k % 10])
                if k == 10:
                    print("written", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(temp)},
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                 os.path.dirname(os.path.abspath(__file__))))))
    try:
        assert child.stdout is not None and child.stdout.readline() == "written\n"
        assert names_at(url)  # shards and the lease are there
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert "KeyboardInterrupt: SIGTERM" in err
    assert not list(temp.iterdir())
    assert not names_at(url)  # its shards removed and the lease released
