"""One storage contract for every object storage scheme (issue 41 item 5, docs/storage.md):
`s3://` against moto's S3 server (tests/_s3.py), `az://` against Azurite and `gs://` against
a GCS emulator (tests/_emulators.py), each on loopback through chute's real client. Convert
writes the dataset there, it opens, an epoch equals the local copy's, the node cache stays
within its limit, a killed convert leaves the old dataset whole, and the conditional writes
the write lease relies on refuse a lost race."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chute import ImageOptions, Pipeline, ShardWindows, cli
from chute.convert import ConvertOptions, convert_imagefolder
from chute.readers import open_dataset, verify_dataset
from chute.readers.storage._object_store import ConflictError, Remote, StorageError
from tests._emulators import Azurite, EmulatorMissing
from tests._media import jpeg
from tests._s3 import cache_peak

pytestmark = pytest.mark.slow  # the emulators are processes

SCHEMES = ("s3", "az", "gs")
IMAGE = {"image": ImageOptions(size=16, backend="cpu", dtype="uint8")}

# why gs:// has no emulator run yet (docs/storage.md, "Schemes")
GCS_NO_EMULATOR = ("no GCS emulator installable here works with obstore's GCSStore "
                   "(docs/storage.md, 'Schemes')")


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    try:
        server = Azurite(tmp_path_factory.mktemp("azurite"))
    except EmulatorMissing as exc:
        pytest.skip(f"Azurite is not available: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=SCHEMES)
def bucket(request, monkeypatch, tmp_path) -> str:
    """A fresh, empty bucket (container) of the scheme, the variables pointing at its server;
    its URL."""
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "20")
    monkeypatch.setenv("CHUTE_DATA_CACHE", str(tmp_path / "node-cache"))
    if request.param == "s3":
        return request.getfixturevalue("s3")[1]
    if request.param == "gs":
        pytest.skip(GCS_NO_EMULATOR)
    server = request.getfixturevalue("azurite")
    for var in ("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_TOKEN", "AZURE_STORAGE_USE_EMULATOR",
                "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID"):
        monkeypatch.delenv(var, raising=False)
    for var, value in server.environment().items():
        monkeypatch.setenv(var, value)
    name = f"chute-{secrets.token_hex(6)}"
    server.create_container(name)
    return f"az://{name}"


def image_folder(root: Path, classes: int, per_class: int, width: int) -> Path:
    for c in range(classes):
        (root / f"class{c}").mkdir()
        for i in range(per_class):
            (root / f"class{c}" / f"{i:03d}.jpg").write_bytes(
                jpeg(width + (i % 5) * 4, width + 38, seed=c * 100 + i))
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """24 small images: a few shards of 8 KB."""
    return image_folder(tmp_path_factory.mktemp("src"), 2, 12, 40)


@pytest.fixture(scope="module")
def larger(tmp_path_factory) -> Path:
    """72 images whose shards outweigh the indices, so a quarter of it holds a few shards."""
    return image_folder(tmp_path_factory.mktemp("larger"), 3, 24, 112)


def convert(src, dst, shard_size: str = "8KB") -> None:
    convert_imagefolder(src, dst, ConvertOptions(shard_size=shard_size, workers=1,
                                                 progress=False))


def batches(dataset, **kw) -> list[dict]:
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 3, **kw}
    with Pipeline(dataset, 4, fields={**IMAGE, "label": None}, **kw) as pipe:
        return [{k: v.clone() for k, v in b.items()} for b in pipe]


def test_convert_open_and_an_epoch_equal_the_local_copy(bucket, folder, tmp_path, capsys):
    url = f"{bucket}/train"
    assert cli.main(["convert", "imagefolder", str(folder), url, "--no-progress",
                     "--shard-size", "8KB", "--workers", "1"]) == 0
    assert f"to {url}" in capsys.readouterr().out
    convert(folder, tmp_path / "local")
    remote = open_dataset(url, cache_dir=tmp_path / "c")
    local = open_dataset(tmp_path / "local")
    assert remote.url == url and len(remote) == len(local) == 24
    assert len(remote.manifest["shards"]) >= 3
    got, want = batches(remote, augment="eval"), batches(local, augment="eval")
    assert len(got) == len(want) == 6
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["label"], b["label"])
    assert verify_dataset(url) == []


def test_the_node_cache_stays_within_its_limit(bucket, larger, tmp_path):
    convert(larger, f"{bucket}/ds", "64KB")
    probe = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "probe")
    sizes = [e["size"] for s in probe.manifest["shards"] for e in s["files"].values()]
    limit = sum(sizes) // 4
    cache = tmp_path / "c"
    with cache_peak(cache) as peak:
        ds = open_dataset(f"{bucket}/ds", cache_dir=cache, cache_limit=limit)
        got = batches(ds, augment="train", order=ShardWindows(shards=1))
    indices = torch.cat([b["index"] for b in got]).tolist()
    assert len(indices) == len(set(indices)) == 72
    assert 0 < peak[0] <= limit + max(sizes)


# a convert killed (SIGKILL) after it has uploaded several shards of the new version
_KILLED = """
import os, signal, sys
from chute.convert import ShardWriter
writer = ShardWriter(sys.argv[1], {"image": "bytes", "label": "int64"}, shard_size="4KB",
                     overwrite=True)
for i in range(40):
    writer.write({"image": bytes([i]) * 3000, "label": i})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_convert_leaves_the_old_dataset_whole(bucket, folder, tmp_path):
    url = f"{bucket}/ds"
    convert(folder, url)
    before = open_dataset(url, cache_dir=tmp_path / "c1")
    objects = {name for name, _ in Remote(url).list()}
    run = subprocess.run([sys.executable, "-c", _KILLED, url], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == -9, run.stderr
    assert len({name for name, _ in Remote(url).list()} - objects) >= 3  # new shards landed
    after = open_dataset(url, cache_dir=tmp_path / "c2")
    assert after.fingerprint == before.fingerprint and len(after) == 24
    for i in range(len(after)):
        assert bytes(after[i]["image"]) == bytes(before[i]["image"])
    assert verify_dataset(url) == []


def test_conditional_writes_refuse_a_lost_race(bucket):
    remote = Remote(f"{bucket}/lease")
    first = remote.put_bytes("holder", b"a", create=True)
    with pytest.raises(ConflictError, match="created or changed meanwhile"):
        remote.put_bytes("holder", b"b", create=True)
    meta = remote.head("holder")
    assert meta is not None and meta["e_tag"] == first
    second = remote.put_bytes("holder", b"c", if_match=first)
    assert second != first and remote.get_bytes("holder") == b"c"
    with pytest.raises(ConflictError, match="created or changed meanwhile"):
        remote.put_bytes("holder", b"d", if_match=first)  # a stale tag: someone wrote since
    assert remote.get_bytes("holder") == b"c"
    assert remote.head("absent") is None


def test_a_missing_bucket_is_one_line_naming_it(bucket, tmp_path):
    scheme = bucket.split("://")[0]
    missing = f"{scheme}://chute-missing-{secrets.token_hex(4)}/ds"
    with pytest.raises(StorageError, match="does not exist; create it") as info:
        open_dataset(missing, cache_dir=tmp_path / "c")
    assert "\n" not in str(info.value) and missing.split("/")[2] in str(info.value)


def test_an_abfs_url_names_the_same_container_as_az(azurite, monkeypatch, tmp_path):
    for var, value in azurite.environment().items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "someone-else")  # the abfs URL's wins
    monkeypatch.setenv("CHUTE_DATA_CACHE", str(tmp_path / "node-cache"))
    name = f"chute-{secrets.token_hex(6)}"
    azurite.create_container(name)
    abfs = f"abfs://{name}@devstoreaccount1.dfs.core.windows.net/ds"
    Remote(abfs).put_bytes("probe", b"written through abfs")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
    assert Remote(f"az://{name}/ds").get_bytes("probe") == b"written through abfs"
