"""The node cache's bookkeeping (docs/storage.md, "The node cache"): a running total that a
download changes without walking the folder, that stays exact with several processes and
after evictions and crashes; and eviction of old versions' indices and manifests (never
those of a version a process has open)."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path

import pytest

from chute.readers.storage._node_cache import NodeCache, VersionPin


def folder_bytes(root: Path) -> int:
    """Every file's bytes (the running total's own file too)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def version(cache: NodeCache, name: str, payload: list[str]) -> Path:
    """A version folder listing `payload` as its payload files (as opening a dataset does)."""
    folder = cache.root / "url" / name
    folder.mkdir(parents=True)
    cache.place(folder / ".payload", "".join(f"{n}\n" for n in payload).encode())
    return folder


def fetch(cache: NodeCache, path: Path, data: bytes, *, wait: bool = True) -> bool:
    def download(temp: Path) -> None:
        temp.write_bytes(data)
        os.replace(temp, path)
    return cache.fetch(download, path, len(data), wait=wait)


def test_a_download_walks_no_folder_and_the_total_stays_exact(tmp_path, monkeypatch):
    cache = NodeCache(tmp_path, limit=5000)
    folder = version(cache, "v", [f"{i}.bin" for i in range(40)])
    pin = VersionPin(folder)  # a version in use: only its payload files are evictable
    walks = []
    walk = os.walk
    monkeypatch.setattr(os, "walk", lambda *a, **k: walks.append(a) or walk(*a, **k))
    for i in range(40):  # 40 x 700 bytes through a 5000-byte limit: most of them evict
        assert fetch(cache, folder / f"{i}.bin", bytes([i]) * 700)
        assert cache.usage() == folder_bytes(tmp_path) <= 5000
    assert walks == []
    pin.release()


def _worker(root: str, folder: str, seed: int, limit: int) -> None:
    import random

    rng = random.Random(seed)
    cache = NodeCache(root, limit)
    pin = VersionPin(Path(folder))
    for _ in range(60):
        i = rng.randrange(80)
        fetch(cache, Path(folder) / f"{i}.bin", bytes([i]) * (100 + 37 * i))
    pin.release()


@pytest.mark.slow
def test_two_processes_sharing_the_cache_keep_the_total_exact(tmp_path):
    limit = 20_000  # a sixth of the 80 files: the processes evict each other's files
    folder = version(NodeCache(tmp_path, limit), "v", [f"{i}.bin" for i in range(80)])
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_worker, args=(str(tmp_path), str(folder), seed, limit))
               for seed in (1, 2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    cache = NodeCache(tmp_path, limit)
    assert cache.usage() == folder_bytes(tmp_path) <= limit
    assert cache.recount() == folder_bytes(tmp_path)


def _die_mid_download(root: str, path: str) -> None:
    def download(temp: Path) -> None:
        temp.write_bytes(b"x" * 100)
        os._exit(3)  # killed mid-download: its reservation stays in the total
    NodeCache(root, 10_000).fetch(download, Path(path), 4000)


@pytest.mark.slow
def test_a_process_that_dies_mid_download_gives_its_reservation_back(tmp_path):
    cache = NodeCache(tmp_path, 10_000)
    folder = version(cache, "v", ["a.bin", "b.bin"])
    child = multiprocessing.get_context("spawn").Process(
        target=_die_mid_download, args=(str(tmp_path), str(folder / "a.bin")))
    child.start()
    child.join(60)
    assert child.exitcode == 3
    assert list(folder.glob(".a.bin.part-*"))  # its temporary file, reserved at 4000 bytes
    assert cache.usage() == folder_bytes(tmp_path) < 100  # given back, the file removed
    assert not list(folder.glob(".a.bin.part-*"))
    assert fetch(cache, folder / "a.bin", b"a" * 4000)
    assert cache.usage() == folder_bytes(tmp_path)


def test_an_old_versions_indices_and_manifest_are_evicted_least_recent_first(tmp_path):
    cache = NodeCache(tmp_path, limit=3000)
    old = version(cache, "old", [])
    cache.place(old / "chute.json", b"m" * 300)
    assert fetch(cache, old / "index.idx", b"i" * 900)
    current = version(cache, "new", ["a.bin", "b.bin"])
    pin = VersionPin(current)
    assert fetch(cache, current / "a.bin", b"a" * 1000)
    os.utime(current / "a.bin", (1e9, 1e9))  # the least recently used payload file
    # b needs 1400 more bytes: a (the oldest) goes first, then the old version's files
    assert fetch(cache, current / "b.bin", b"b" * 2400)
    assert not (current / "a.bin").exists()
    assert not (old / "index.idx").exists() and not (old / "chute.json").exists()
    assert (current / "b.bin").exists() and (current / ".payload").exists()
    assert cache.usage() == folder_bytes(tmp_path) <= 3000
    pin.release()


def test_the_files_of_a_version_a_process_has_open_are_not_evicted(tmp_path):
    cache = NodeCache(tmp_path, limit=2000)
    other = version(cache, "other", [])
    assert fetch(cache, other / "index.idx", b"i" * 900)
    held = VersionPin(other)  # another reader has that version open
    current = version(cache, "new", ["a.bin"])
    pin = VersionPin(current)
    assert not fetch(cache, current / "a.bin", b"a" * 1500, wait=False)
    assert (other / "index.idx").exists()
    held.release()
    del held
    gc.collect()
    assert fetch(cache, current / "a.bin", b"a" * 1500, wait=False)
    assert not (other / "index.idx").exists()
    pin.release()
