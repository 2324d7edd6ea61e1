"""The node cache is a trust boundary (issue 37 items 3, 4, 7, 10; docs/storage.md, "The node
cache"): eviction never deletes outside the cache folder whatever its folders, links and
bookkeeping hold; a cached file is checked before it is mapped and downloaded again when it
is not what the manifest says; bookkeeping that does not parse or add up is counted again;
a mapping holds no descriptor. Hostile contents are built here, at test time."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import xxhash

from chute.errors import ChuteError, FormatError
from chute.readers.format._manifest_check import check_manifest
from chute.readers.storage._files import map_path
from chute.readers.storage._node_cache import NodeCache, VersionPin, cache_limit_bytes
from chute.readers.storage._shard_files import RemoteFile, ShardFiles


def folder_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def fetch(cache: NodeCache, path: Path, data: bytes) -> bool:
    def download(temp: Path) -> None:
        temp.write_bytes(data)
        os.replace(temp, path)
    return cache.fetch(download, path, len(data))


def victims(tmp_path: Path) -> Path:
    """A folder outside the cache holding files eviction must never touch."""
    outside = tmp_path / "outside"
    (outside / "v" / "00000").mkdir(parents=True)
    for name in ("victim.txt", "v/00000/image.bin", "v/chute.json"):
        (outside / name).write_bytes(b"x" * 500)
    return outside


def outside_intact(outside: Path) -> bool:
    return all((outside / n).read_bytes() == b"x" * 500
               for n in ("victim.txt", "v/00000/image.bin", "v/chute.json"))


# -- item 3: eviction ------------------------------------------------------------------------
def test_eviction_does_not_follow_a_symlinked_folder_out_of_the_cache(tmp_path):
    outside = victims(tmp_path)
    cache = NodeCache(tmp_path / "cache", limit=3000)
    os.symlink(outside, cache.root / "x")  # CACHE/x/v looks like an unused version
    folder = cache.root / "url" / "v"
    folder.mkdir(parents=True)
    for i in range(10):  # 10 x 700 bytes through 3000: evicts every evictable file
        assert fetch(cache, folder / f"{i}.bin", bytes([i]) * 700)
    assert outside_intact(outside)


def test_bookkeeping_naming_files_outside_is_not_followed(tmp_path):
    outside = victims(tmp_path)
    cache = NodeCache(tmp_path / "cache", limit=3000)
    cache.usage()
    usage = json.loads((cache.root / ".usage").read_bytes())
    usage["parts"] = {"../outside/victim.txt": 500, "../outside/.victim.txt.part-999999-ab": 5}
    (cache.root / ".usage").write_text(json.dumps(usage))
    folder = cache.root / "url" / "v"
    folder.mkdir(parents=True)
    pin = VersionPin(folder)  # in use: only the listing's files are evictable
    listing = "../../../outside/victim.txt\n00000/../../../../outside/v/chute.json\n" \
              "\n../../outside/v/00000/image.bin\n" + "".join(f"{i}.bin\n" for i in range(10))
    (folder / ".payload").write_text(listing)
    for i in range(10):
        assert fetch(cache, folder / f"{i}.bin", bytes([i]) * 700)
    assert outside_intact(outside)
    assert cache.usage() == folder_bytes(cache.root) <= 3000
    pin.release()


def test_a_symlinked_shard_folder_in_a_version_in_use_is_not_followed(tmp_path):
    outside = victims(tmp_path)
    cache = NodeCache(tmp_path / "cache", limit=3000)
    folder = cache.root / "url" / "v"
    folder.mkdir(parents=True)
    os.symlink(outside / "v" / "00000", folder / "00000")
    (folder / ".payload").write_text("00000/image.bin\n" + "".join(f"{i}.bin\n" for i in range(10)))
    pin = VersionPin(folder)
    for i in range(10):
        assert fetch(cache, folder / f"{i}.bin", bytes([i]) * 700)
    assert outside_intact(outside)
    pin.release()


@pytest.mark.parametrize("name", ["a\nb", "a\0b", "../x", "a/b", "chute.json", ".version.pin",
                                  ".payload", ".usage", "x" * 300])
def test_a_shard_or_file_name_the_cache_cannot_hold_is_refused_when_the_manifest_is_read(
        tmp_path, name):
    shard = {"name": "00000", "num_samples": 1, "files": {"image.bin": {"size": 1}}}
    for bad in ({**shard, "name": name}, {**shard, "files": {name: {"size": 1}}}):
        manifest = {"format": "chute", "version": 1, "num_samples": 1,
                    "fields": {"image": {"kind": "bytes"}}, "shards": [bad]}
        with pytest.raises(FormatError) as info:
            check_manifest(tmp_path / "chute.json", manifest)
        assert "\n" not in str(info.value) and "chute.json" in str(info.value)


def test_a_cache_folder_of_another_user_is_refused_unless_shared(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, 65534, 65534)
    monkeypatch.delenv("CHUTE_DATA_CACHE_SHARED", raising=False)
    with pytest.raises(ChuteError, match="belongs to another user.*CHUTE_DATA_CACHE_SHARED"):
        NodeCache(folder)
    NodeCache(folder, shared=True)
    monkeypatch.setenv("CHUTE_DATA_CACHE_SHARED", "1")
    NodeCache(folder)
    os.chmod(tmp_path / "theirs", 0o777)
    monkeypatch.delenv("CHUTE_DATA_CACHE_SHARED")
    os.chown(folder, os.geteuid(), os.getegid())
    with pytest.raises(ChuteError, match="writable by every user"):
        NodeCache(folder)


# -- item 4: a cached file is checked before it is mapped ----------------------------------
class FakeRemote:
    """Serves one object; counts downloads."""

    def __init__(self, data: bytes):
        self.data = data
        self.downloads = 0

    def where(self, name: str) -> str:
        return f"s3://bucket/{name}"

    def download(self, name, dest, size, checksum, *, temp):
        self.downloads += 1
        Path(temp).write_bytes(self.data)
        os.replace(temp, dest)


def shard_files(tmp_path: Path, data: bytes) -> tuple[ShardFiles, Path, FakeRemote]:
    cache = NodeCache(tmp_path / "cache")
    folder = cache.root / "url" / "v" / "00000"
    folder.mkdir(parents=True)
    path = folder / "image.bin"
    remote = FakeRemote(data)
    files = {path: RemoteFile("00000/image.bin", len(data), xxhash.xxh3_64_hexdigest(data))}
    return ShardFiles(remote, cache, files, None, map_path), path, remote  # type: ignore[arg-type]


DATA = bytes(range(256)) * 40


def hostile(path: Path, kind: str, tmp_path: Path) -> None:
    path.unlink(missing_ok=True)
    if kind == "symlink":
        secret = tmp_path / "secret"
        secret.write_bytes(b"root:x:0:0" * (len(DATA) // 10) + b"!" * (len(DATA) % 10))
        os.symlink(secret, path)
    elif kind == "truncated":
        path.write_bytes(DATA[:100])
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "inside").write_bytes(b"1")
    elif kind == "same size, other bytes":
        path.write_bytes(DATA[::-1])
        os.chmod(path, 0o444)
    elif kind == "writable by others":
        path.write_bytes(DATA)
        os.chmod(path, 0o666)


@pytest.mark.parametrize("kind", ["symlink", "truncated", "fifo", "folder",
                                  "same size, other bytes", "writable by others"])
def test_a_damaged_cached_shard_is_downloaded_again_never_delivered(tmp_path, kind):
    files, path, remote = shard_files(tmp_path, DATA)
    hostile(path, kind, tmp_path)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(bytes(files.map(path))), daemon=True)
    reader.start()
    reader.join(20)
    assert got == [DATA]  # neither a hang nor the link's or the damaged bytes
    assert remote.downloads == 1
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444
    files.release()
    assert files.cache.usage() == folder_bytes(files.cache.root)


def test_a_file_changed_between_processes_is_checked_by_the_next_one(tmp_path):
    files, path, remote = shard_files(tmp_path, DATA)
    assert bytes(files.map(path)) == DATA
    files.release()
    hostile(path, "same size, other bytes", tmp_path)
    again = ShardFiles(files.remote, files.cache, files.files, None, map_path)  # a new process
    assert bytes(again.map(path)) == DATA
    assert remote.downloads == 2


@pytest.mark.slow  # starts a process (as another user)
def test_a_cached_file_cannot_be_shrunk_by_another_user(tmp_path):
    """A mapped file shrinking SIGBUSes its reader: the cache's files are read-only and owned
    by their downloader, so no other user can shrink one (docs/storage.md)."""
    files, path, _ = shard_files(tmp_path, DATA)
    files.map(path)
    code = "import os, sys; os.setuid(65534); os.truncate(sys.argv[1], 10)"
    if os.geteuid() == 0:
        os.chmod(tmp_path, 0o755)
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True)
        assert b"PermissionError" in done.stderr
    assert os.stat(path).st_size == len(DATA)
    assert not os.stat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH | stat.S_IWUSR)


# -- item 7: bookkeeping ---------------------------------------------------------------------
@pytest.mark.parametrize("usage", [
    {"files": -10**9, "parts": {}, "counted": "now"},
    {"files": 0, "parts": {}, "counted": "future"},
    {"files": 1e400, "parts": {}, "counted": "now"},
    {"files": 0, "parts": {"x/.a.part-1-ab": -10**9}, "counted": "now"},
    {"files": True, "parts": [], "counted": "now"},
    {"files": 0, "parts": {}, "counted": float("nan")},
])
def test_bookkeeping_that_does_not_parse_or_add_up_is_counted_again(tmp_path, usage):
    cache = NodeCache(tmp_path, limit=3000)
    folder = cache.root / "url" / "v"
    folder.mkdir(parents=True)
    assert fetch(cache, folder / "a.bin", b"a" * 1000)
    when = {"now": time.time(), "future": time.time() + 10**9}
    usage = {**usage, "counted": when.get(usage["counted"], usage["counted"])}
    text = json.dumps(usage).replace("Infinity", "1e400")
    (cache.root / ".usage").write_text(text)
    for i in range(6):  # the limit still holds
        assert fetch(cache, folder / f"{i}.bin", bytes([i]) * 900)
        assert cache.usage() == folder_bytes(tmp_path) <= 3000


@pytest.mark.parametrize("value", [1.5, float("nan"), [1], "9" * 5000, "-5GB", True, "0"])
def test_a_cache_limit_that_is_not_a_size_is_one_line(value, monkeypatch):
    with pytest.raises(ChuteError) as info:
        cache_limit_bytes(value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300
    if isinstance(value, str):
        from chute.readers.storage._node_cache import default_cache_limit

        monkeypatch.setenv("CHUTE_DATA_CACHE_LIMIT", value)
        with pytest.raises(ChuteError, match="CHUTE_DATA_CACHE_LIMIT"):
            default_cache_limit()


# -- ENOSPC / EROFS --------------------------------------------------------------------------
def test_a_full_cache_disk_is_one_line_naming_the_cache_folder(tmp_path):
    import errno

    cache = NodeCache(tmp_path)
    folder = cache.root / "url" / "v"
    folder.mkdir(parents=True)
    for code in (errno.ENOSPC, errno.EROFS):
        def download(temp: Path, code=code) -> None:
            raise OSError(code, os.strerror(code))
        with pytest.raises(ChuteError) as info:
            cache.fetch(download, folder / "a.bin", 10)
        assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("where", [".incoming-", "chute.json", ".version.pin"])
def test_a_full_cache_disk_before_any_download_is_one_line(s3, tmp_path, monkeypatch, where):
    # the manifest's staging folder, the manifest in it, or the version folder's pin: written
    # before any shard is fetched (a raw OSError before)
    import errno
    from pathlib import Path

    from chute.convert import ShardWriter
    from chute.readers import open_dataset

    _, bucket = s3
    with ShardWriter(f"{bucket}/ds", {"blob": "bytes"}, shard_size="2KB") as writer:
        for i in range(4):
            writer.write({"blob": bytes([i]) * 100})
    real_mkdir, real_write, real_open = Path.mkdir, Path.write_bytes, os.open

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    def mkdir(self, *args, **kwargs):
        return full(self) if self.name.startswith(where) else real_mkdir(self, *args, **kwargs)

    def write_bytes(self, data):
        return full(self) if self.name == where and ".incoming-" in str(self) else \
            real_write(self, data)

    def open_(path, *args, **kwargs):
        return full(path) if str(path).endswith(where) else real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(ChuteError, match="no space left on device") as info:
        open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "cache")
    assert str(tmp_path / "cache") in str(info.value) and "\n" not in str(info.value)


# -- item 10: one descriptor per mapped file -------------------------------------------------
_MANY = r"""
import resource, sys
import numpy as np
from chute.readers import open_dataset
resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
ds = open_dataset(sys.argv[1])
print(sum(len(ds[i]["blob"]) for i in range(len(ds))))
"""


@pytest.mark.slow
def test_a_dataset_of_more_shards_than_open_files_allowed_opens(tmp_path):
    from chute.convert._write_dataset import write_dataset

    samples = ({"blob": bytes([i % 256]) * 64, "label": i} for i in range(300))
    write_dataset(samples, tmp_path / "ds", fields={"blob": "bytes", "label": "scalar"},
                  shard_size=64)
    assert len(list((tmp_path / "ds").iterdir())) > 250
    done = subprocess.run([sys.executable, "-c", _MANY, str(tmp_path / "ds")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(300 * 64)


# -- item 5: the manifest's own checksum -----------------------------------------------------
def test_a_manifest_damaged_in_flight_or_in_the_cache_is_never_used(s3, tmp_path):
    from chute.convert import ShardWriter
    from chute.readers import open_dataset
    from chute.readers.storage._object_store import Remote

    _, bucket = s3
    with ShardWriter(f"{bucket}/ds", {"blob": "bytes", "label": "int64"}, shard_size="2KB",
                     class_names=["cat", "dog"]) as writer:
        for i in range(20):
            writer.write({"blob": bytes([i]) * 300, "label": i % 2})
    remote = Remote(f"{bucket}/ds")
    good = remote.get_bytes("chute.json")
    ds = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "cache")
    assert ds.class_names == ["cat", "dog"]
    # damaged in the cache: a reopen by fingerprint (a DDP rank) fetches it again
    cached = ds._remote.folder / "chute.json"
    cached.chmod(0o644)
    cached.write_bytes(good.replace(b'"dog"', b'"cow"'))
    again = open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "cache")
    assert again.class_names == ["cat", "dog"]
    # damaged "in flight" (what the server sends): refused, never cached
    remote.put_bytes("chute.json", good.replace(b'"dog"', b'"cow"'))
    with pytest.raises(FormatError, match="own checksum") as info:
        open_dataset(f"{bucket}/ds", cache_dir=tmp_path / "fresh")
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "fresh").rglob("chute.json"))


def test_too_many_open_files_is_said_as_itself_not_as_a_damaged_dataset(tmp_path, monkeypatch):
    import errno

    from chute.convert._write_dataset import write_dataset
    from chute.readers import verify_dataset
    from chute.readers.kinds import _kind_scalar

    write_dataset(({"blob": b"x" * 10, "label": i} for i in range(4)), tmp_path / "ds",
                  fields={"blob": "bytes", "label": "scalar"})

    def no_descriptor(path):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
    monkeypatch.setattr(_kind_scalar, "map_npy", no_descriptor)
    with pytest.raises(ChuteError, match="too many open files.*ulimit -n") as info:
        verify_dataset(tmp_path / "ds")
    assert "re-convert" not in str(info.value) and "\n" not in str(info.value)


def test_the_fingerprint_covers_everything_the_manifest_says():
    from chute.readers.format._manifest import manifest_fingerprint

    manifest = {"format": "chute", "version": 1, "num_samples": 1, "class_names": ["a", "b"],
                "fields": {"blob": {"kind": "bytes"}},
                "shards": [{"name": "00000", "num_samples": 1,
                            "files": {"blob.bin": {"size": 3, "xxh3_64": "0" * 16}}}]}
    other = json.loads(json.dumps(manifest))
    other["class_names"] = ["a", "c"]
    assert manifest_fingerprint(manifest) != manifest_fingerprint(other)
    other = json.loads(json.dumps(manifest))
    other["shards"][0]["files"]["blob.bin"]["size"] = 4
    assert manifest_fingerprint(manifest) != manifest_fingerprint(other)


# -- item 6: a download is capped at the manifest's size --------------------------------------
def test_a_download_stops_one_byte_past_the_manifests_size(s3, tmp_path):
    from chute.readers.storage._object_store import Remote, StorageError

    _, bucket = s3
    remote = Remote(f"{bucket}/ds")
    remote.put_bytes("big.bin", os.urandom(3 << 20))
    remote.put_bytes("empty.bin", b"")
    with pytest.raises(StorageError, match="1001 bytes arrived, the manifest says 1000"):
        remote.download("big.bin", tmp_path / "big.bin", 1000, None)
    assert not list(tmp_path.iterdir())  # nothing left behind
    remote.download("empty.bin", tmp_path / "empty.bin", 0, xxhash.xxh3_64_hexdigest(b""))
    assert (tmp_path / "empty.bin").read_bytes() == b""
    data = os.urandom(5000)
    remote.put_bytes("exact.bin", data)
    remote.download("exact.bin", tmp_path / "exact.bin", 5000, xxhash.xxh3_64_hexdigest(data))
    assert (tmp_path / "exact.bin").read_bytes() == data
