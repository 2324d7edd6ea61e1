"""`chute verify` of a dataset in object storage over a lossy link (issue 37 item 11): bytes of
the manifest or of an object damaged on the way are read again, not reported as a corrupted
dataset to re-convert; a mismatch every read repeats (the object changed in storage) is."""

from __future__ import annotations

import pytest

from chute.cli import main
from chute.readers import verify_dataset
from chute.readers.storage._object_store import Remote
from tests._s3 import FaultProxy
from tests.readers.storage.test_object_storage import samples, write


@pytest.fixture
def lossy(s3, monkeypatch):
    """A dataset in the bucket, read through a fault proxy; yields (proxy, url)."""
    server, bucket = s3
    write(f"{bucket}/ds", samples(20))
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    yield proxy, f"{bucket}/ds"
    proxy.close()


def test_an_object_damaged_in_flight_once_is_read_again(lossy, capsys):
    proxy, url = lossy
    proxy.corrupt_reply("GET", r"\.bin\b")
    assert verify_dataset(url) == []
    assert proxy.flipped == 1
    proxy.corrupt_reply("GET", r"\.bin\b")
    assert main(["verify", url, "--no-progress"]) == 0
    assert "OK" in capsys.readouterr().out


def test_a_manifest_damaged_in_flight_once_is_read_again(lossy):
    proxy, url = lossy
    proxy.corrupt_reply("GET", r"/chute\.json\b")
    assert verify_dataset(url) == []
    assert proxy.flipped == 1


def test_an_object_changed_in_storage_is_still_reported(lossy):
    proxy, url = lossy
    remote = Remote(url)
    name = next(n for n, _ in remote.list() if n.endswith(".bin"))
    data = bytearray(remote.get_bytes(name))
    data[len(data) // 2] ^= 0xFF
    remote.put_bytes(name, bytes(data))
    problems = verify_dataset(url)
    assert len(problems) == 1 and name in problems[0]
    assert "checksum mismatch in 3 reads" in problems[0]


def test_damage_in_every_read_is_reported(lossy):
    proxy, url = lossy
    proxy.corrupt_reply("GET", r"-00000/image\.bin\b", times=3)
    problems = verify_dataset(url)
    assert len(problems) == 1 and "checksum mismatch in 3 reads" in problems[0]
    assert proxy.flipped == 3
