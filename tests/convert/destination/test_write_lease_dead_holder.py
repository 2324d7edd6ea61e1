"""A killed s3 write's lease (issue 38 item 4): held by a process of this host that no longer
runs, it is taken over at once, saying so, instead of blocking the URL for
CHUTE_S3_LEASE_SECONDS; a live holder, or one on another host, still refuses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from chute.convert.destination._write_lease import LEASE
from chute.errors import ChuteError
from chute.readers.storage._object_store import Remote
from tests.convert.destination.test_write_lease import assert_holds, rows, writer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def lease_of(pid: int, host: str) -> bytes:
    return json.dumps({"token": "w0dead", "host": host, "pid": pid,
                       "since": "2026-01-01T00:00:00+00:00", "renewals": 0}).encode()


@pytest.mark.slow
def test_the_lease_of_a_killed_writer_on_this_host_is_taken_over(s3, tmp_path, capfd):
    server, bucket = s3
    url = f"{bucket}/ds"
    script = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        from chute.convert import ShardWriter
        w = ShardWriter({url!r}, {{"image": "bytes", "label": "int64"}}, shard_size="8KB")
        for i in range(6):
            w.write({{"image": bytes(3000), "label": i}})
        print("writing", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env=os.environ.copy())
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert LEASE in dict(Remote(url).list())  # the killed write left its lease, fresh
    new = rows(12, 1)
    t0 = time.monotonic()
    with writer(url) as w:  # CHUTE_S3_LEASE_SECONDS is 600: no waiting for it to expire
        for row in new:
            w.write(row)
    assert time.monotonic() - t0 < 30
    assert_holds(url, new, tmp_path / "c")
    err = capfd.readouterr().err
    assert f"taking over the lease {url}/{LEASE} of pid {child.pid} on " \
           f"{socket.gethostname()}" in err and "no longer running" in err


def test_a_live_holder_or_one_on_another_host_still_refuses(s3, tmp_path):
    server, bucket = s3
    url = f"{bucket}/ds"
    remote = Remote(url)
    for body in (lease_of(os.getppid(), socket.gethostname()),  # alive
                 lease_of(2**22 + 7, "another-host.example")):  # cannot be told: not ours
        remote.put_bytes(LEASE, body)
        with pytest.raises(ChuteError, match="another writer .* is writing this dataset"):
            writer(url)
        remote.delete([LEASE])
