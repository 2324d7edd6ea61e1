"""A Pipeline over a dataset in object storage (issue 23, "Must show"), against moto's S3
server on loopback (tests/_s3.py): the same batches as the local copy, a cache a quarter of
the dataset's size, and an endpoint that goes away mid-epoch and comes back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from chute import ImageOptions, Pipeline, ShardWindows
from chute.convert import ConvertOptions, convert_imagefolder
from chute.readers import open_dataset
from tests._media import jpeg
from tests._s3 import cache_peak

IMAGE = {"image": ImageOptions(size=24, backend="cpu", dtype="uint8")}


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "src"
    for c in range(3):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(24):
            (root / f"class{c}" / f"{i:03d}.jpg").write_bytes(
                jpeg(112 + (i % 5) * 4, 150, seed=c * 100 + i))
    return root


def convert(src, dst) -> None:
    convert_imagefolder(src, dst, ConvertOptions(shard_size="64KB", workers=1, progress=False))


def batches(dataset, **kw) -> list[dict]:
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 7, **kw}
    with Pipeline(dataset, 8, fields={**IMAGE, "label": None}, **kw) as pipe:
        return [{k: v.clone() for k, v in b.items()} for b in pipe]


def payload_bytes(dataset) -> int:
    return sum(e["size"] for s in dataset.manifest["shards"] for e in s["files"].values())


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
def test_eval_over_s3_delivers_exactly_the_local_batches(s3, folder, tmp_path):
    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    convert(folder, tmp_path / "local")
    remote = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c", cache_limit="10MB")
    assert len(remote.manifest["shards"]) >= 4
    got = batches(remote, augment="eval")
    want = batches(open_dataset(tmp_path / "local"), augment="eval")
    assert len(got) == len(want) == 9
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["label"], b["label"])


@pytest.mark.slow
def test_a_quarter_size_cache_completes_a_training_epoch_within_its_limit(s3, folder,
                                                                           tmp_path):
    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    probe = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "probe")
    total = payload_bytes(probe)
    largest = max(e["size"] for s in probe.manifest["shards"] for e in s["files"].values())
    limit = total // 4
    cache = tmp_path / "c"
    with cache_peak(cache) as peak:
        ds = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=limit)
        got = batches(ds, augment="train", order=ShardWindows(shards=1))
    seen = torch.cat([b["index"] for b in got]).tolist()
    assert len(seen) == len(set(seen)) == 72  # drop_last: 9 full batches of 8
    assert 0 < peak[0] <= limit + largest


@pytest.mark.slow
def test_an_endpoint_away_for_seconds_mid_epoch_changes_nothing(s3, folder, tmp_path,
                                                                monkeypatch):
    from tests._s3 import FaultProxy

    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    want = batches(open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "ref"), augment="eval")
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("CHUTE_READ_AHEAD", "1")
    try:
        ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
        got = []
        kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 7, "augment": "eval",
              "prefetch": 1}
        with Pipeline(ds, 8, fields={**IMAGE, "label": None}, **kw) as pipe:
            for k, batch in enumerate(pipe):
                got.append({key: v.clone() for key, v in batch.items()})
                if k == 1:  # the endpoint goes away for a while, then comes back
                    proxy.set_down(True)
                    threading.Timer(2.0, proxy.set_down, args=(False,)).start()
    finally:
        proxy.close()
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


@pytest.mark.slow
def test_a_server_restart_mid_epoch_changes_nothing(s3, folder, tmp_path, monkeypatch):
    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    want = batches(open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "ref"), augment="eval")
    monkeypatch.setenv("CHUTE_READ_AHEAD", "1")
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")
    got = []
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 7, "augment": "eval",
          "prefetch": 1}
    restarted = threading.Event()

    def restart() -> None:
        server.stop()
        time.sleep(2.0)
        server.start()
        restarted.set()

    try:
        with Pipeline(ds, 8, fields={**IMAGE, "label": None}, **kw) as pipe:
            for k, batch in enumerate(pipe):
                got.append({key: v.clone() for key, v in batch.items()})
                if k == 1:
                    threading.Thread(target=restart, daemon=True).start()
    finally:
        restarted.wait(30)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


@pytest.mark.slow
def test_an_endpoint_that_stops_answering_mid_epoch_fails_by_the_deadline(s3, folder, tmp_path,
                                                                         monkeypatch, capsys):
    # issue 38 item 1: connections accepted, nothing sent back; the epoch used to stall 241 s
    # with CHUTE_S3_RETRY_SECONDS=15 (a fixed 120 s request timeout); 3 s here, to be quick
    from chute.readers import StorageError
    from chute.readers.storage import _object_store
    from tests._s3 import FaultProxy

    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("CHUTE_READ_AHEAD", "1")
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "3")
    monkeypatch.setattr(_object_store, "_REPORT", 1.0)  # a line every 10 s in a real run
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 7, "augment": "eval",
          "prefetch": 1}
    try:
        ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c")  # indices, no payload
        proxy.frozen = True
        t0 = time.monotonic()
        with pytest.raises(StorageError) as info:
            with Pipeline(ds, 8, fields={**IMAGE, "label": None}, **kw) as pipe:
                list(pipe)
    finally:
        proxy.close()
    took = time.monotonic() - t0
    assert took < 8, took  # the deadline and a little, far from 120 s
    assert "\n" not in str(info.value) and "failed for 3 s" in str(info.value)
    err = capsys.readouterr().err
    assert "failing for" in err and "CHUTE_S3_RETRY_SECONDS" in err


@pytest.mark.slow
def test_a_new_process_delivers_the_local_batches_from_the_cache_with_the_endpoint_down(
        s3, folder, tmp_path, monkeypatch):
    # issue 38 item 3: a new process used to wait 300 s for the manifest and fail
    import os
    import subprocess
    import sys

    from tests._s3 import FaultProxy

    server, bucket = s3
    convert(folder, f"{bucket}/ds")
    convert(folder, tmp_path / "local")
    proxy = FaultProxy(server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "300")  # the default: nothing may wait for it
    batches(open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "c"), augment="eval")  # cached
    proxy.set_down(True)
    script = (
        "import time\n"
        "import torch\n"
        "from chute.readers import open_dataset\n"
        "from tests.pipelines.test_remote_pipeline import batches\n"
        "t0 = time.monotonic()\n"
        f"ds = open_dataset({bucket + '/ds'!r}, cache_dir={str(tmp_path / 'c')!r})\n"
        "print(f'opened {time.monotonic() - t0:.2f}')\n"
        f"torch.save(batches(ds, augment='eval'), {str(tmp_path / 'got.pt')!r})\n")
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120, cwd=root, env=os.environ.copy())
    finally:
        proxy.close()
    assert done.returncode == 0, done.stderr[-2000:]
    # the open itself (imports left out: they took up to 12 s on a loaded 2-core machine)
    assert float(done.stdout.split("opened ")[1].split()[0]) < 10
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "from the node cache" in warnings[0], done.stderr[-2000:]
    got = torch.load(tmp_path / "got.pt")
    want = batches(open_dataset(tmp_path / "local"), augment="eval")
    assert len(got) == len(want) == 9
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["label"], b["label"])
