"""Opening a dataset in object storage (docs/storage.md): its manifest and small files
(indices, columns, metadata, tables) are fetched into the node cache at open, the payload
files of each shard when first read (`storage/_shard_files.py`).

The cache folder of a dataset is named by its URL and its manifest's fingerprint, so another
version of the dataset never reads this one's files. A process that reopens a dataset it
knows the fingerprint of (a DDP rank, a DALI worker, an unpickled Dataset) uses the cached
manifest without asking the server: an epoch goes on while the endpoint is away. A new process
whose endpoint does not answer within a few seconds opens the newest version whose files are
all in the cache, saying so in one line; offline (`CHUTE_OFFLINE=1`, `offline=True`), it never
asks the server."""

from __future__ import annotations

import math
import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from chute.errors import FormatError
from chute.readers.format._manifest import (
    MANIFEST,
    MANIFEST_CHECKSUM,
    load_manifest,
    manifest_fingerprint,
)
from chute.readers.kinds._kinds import field_files
from chute.readers.storage._files import CHECKSUM
from chute.readers.storage._node_cache import (
    PAYLOAD_LIST,
    NodeCache,
    VersionPin,
    cache_limit_bytes,
    default_cache_dir,
    default_cache_limit,
    local_error,
)
from chute.readers.storage._object_store import Remote, StorageError, UnreachableError
from chute.readers.storage._rewritten import download_listed
from chute.readers.storage._shard_files import RemoteFile, ShardFiles

__all__ = ["RemoteSource", "open_remote", "remote_of", "verify_remote"]

_PARALLEL = 16  # small files fetched at once when a dataset is opened
_TRY_SECONDS = 4.0  # how long the server is tried before a fully cached version stands in
_USAGE_ROOM = 4096  # the cache's running total (.usage) grows while downloads are in flight
_MAX_OBJECT = 5 << 40  # the largest object S3 stores (5 TiB)
_VERIFY_READS = 3  # `chute verify` reads a mismatching object this often before condemning it


@dataclass
class RemoteSource:
    """A remote dataset opened in this process.

    Attributes:
        url: its URL. folder: its version folder in the node cache. fingerprint: its identity.
        cache_dir, cache_limit: the cache settings (what another process reopens it with).
        files: its payload files (fetched on first use). shard_paths: each shard's payload
        files, in shard order. pin: keeps the version's files from eviction while it is open.
        offline: opened with offline=True (a reopen never asks the server either).
    """

    url: str
    folder: Path
    fingerprint: str
    cache_dir: str
    cache_limit: int | None
    files: ShardFiles
    shard_paths: list[list[Path]]
    pin: VersionPin | None = None
    offline: bool = False


def remote_of(url: str, cache_dir, cache_limit, *,
              offline: bool = False) -> tuple[Remote, NodeCache]:
    """The client and the node cache for `url` with these settings (defaults from the
    environment: CHUTE_DATA_CACHE, CHUTE_DATA_CACHE_LIMIT, CHUTE_OFFLINE)."""
    limit = default_cache_limit() if cache_limit is None else cache_limit_bytes(cache_limit)
    if limit is not None and limit <= 0:
        raise FormatError(f"{url}: cache_limit must be a positive size (e.g. '50GB'), got "
                          f"{cache_limit!r}")
    return Remote(url, offline=offline), NodeCache(cache_dir or default_cache_dir(), limit)


def _complete(folder: Path) -> dict | None:
    """The manifest of the cached version `folder` when every file it lists is there as a
    regular file of its size, else None."""
    try:
        manifest = _own_checked(folder)
        if manifest is None:
            return None
        listed, _ = _files(manifest)
        for name, (entry, _lazy) in listed.items():
            stat = os.lstat(folder / name)
            if not S_ISREG(stat.st_mode) or stat.st_size != entry["size"]:
                return None
    except (OSError, FormatError, KeyError, TypeError, ValueError):
        return None
    return manifest


def _own_checked(folder: Path) -> dict | None:
    """The manifest in `folder` when it parses and its own checksum (when it has one) matches
    its content, else None: a manifest damaged in flight or in the cache is never used."""
    from chute.readers.format._manifest import manifest_checksum

    try:
        manifest = load_manifest(folder)
    except FormatError:
        return None
    own = manifest.get(MANIFEST_CHECKSUM)
    return manifest if own is None or own == manifest_checksum(manifest) else None


def _cached(remote: Remote, cache: NodeCache) -> tuple[dict, Path, VersionPin] | None:
    """The newest version of `remote`'s dataset (its manifest last placed or opened) whose
    files are all in the cache, pinned; None when there is none."""
    parent = cache.version_folder(remote.url, "-").parent
    try:
        folders = [f for f in parent.iterdir() if (f / MANIFEST).is_file()]
    except OSError:
        return None
    folders.sort(key=lambda f: (f / MANIFEST).stat().st_mtime, reverse=True)
    for folder in folders:
        pin = VersionPin(folder)  # first: eviction waits for it while the files are checked
        manifest = _complete(folder)
        if manifest is not None and manifest_fingerprint(manifest) == folder.name:
            return manifest, folder, pin
        pin.release()
    return None


def _manifest(remote: Remote, cache: NodeCache,
              fingerprint: str | None) -> tuple[dict, Path, VersionPin]:
    """The manifest, the version folder, and a pin on it held while this process has the
    version open (its files are not evicted meanwhile): from the cache when `fingerprint` is
    known and cached, else downloaded (and checked) now; when the server does not answer (or
    offline), the newest version the cache holds completely."""
    if fingerprint is not None:
        folder = cache.version_folder(remote.url, fingerprint)
        pin = VersionPin(folder)
        cached_manifest = _own_checked(folder)
        if cached_manifest is not None and manifest_fingerprint(cached_manifest) == fingerprint:
            return cached_manifest, folder, pin
        cache.discard(folder / MANIFEST)  # damaged in the cache: fetched again below
        pin.release()
    cached = _cached(remote, cache) if fingerprint is None else None
    if remote.offline:
        if cached is None:
            raise StorageError(f"{remote.url}: offline (CHUTE_OFFLINE=1 or offline=True) and no "
                               f"complete version of it is in the node cache {cache.root}; "
                               "open it once online with this cache_dir, or unset "
                               "CHUTE_OFFLINE")
        return cached
    incoming = cache.root / f".incoming-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        incoming.mkdir(parents=True)
    except OSError as exc:  # a full or read-only cache disk: one line naming it
        raise local_error(cache.root, exc, incoming) from None
    try:
        try:
            # with a complete copy at hand, an endpoint that does not answer costs seconds
            data = remote.get_bytes(MANIFEST, seconds=_TRY_SECONDS if cached else None)
        except UnreachableError as exc:
            if cached is None:
                raise
            manifest, folder, pin = cached
            when = time.strftime("%Y-%m-%d %H:%M UTC",
                                 time.gmtime((folder / MANIFEST).stat().st_mtime))
            reason = str(exc).split("(", 1)[-1].split(")", 1)[0]
            print(f"chute: warning: {remote.url}: the endpoint did not answer ({reason}); "
                  f"reading version {folder.name} from the node cache (last opened {when}); "
                  "set CHUTE_OFFLINE=1 to skip asking", file=sys.stderr, flush=True)
            return cached
        if cached is not None:
            cached[2].release()
        for attempt in range(3):  # a manifest damaged in flight is fetched again
            if attempt:
                data = remote.get_bytes(MANIFEST)
            try:
                (incoming / MANIFEST).write_bytes(data)
            except OSError as exc:
                raise local_error(cache.root, exc, incoming / MANIFEST) from None
            try:
                manifest = load_manifest(incoming)
                if _own_checked(incoming) is None:
                    raise FormatError(f"{incoming}: its own checksum ({MANIFEST_CHECKSUM}) does "
                                      "not match its content (3 downloads); check the network, "
                                      "or re-convert the dataset there")
                break
            except FormatError as exc:
                if attempt == 2:
                    raise FormatError(f"{remote.where(MANIFEST)}: "
                                      f"{str(exc).split(': ', 1)[-1]}") from None
        folder = cache.version_folder(remote.url, manifest_fingerprint(manifest))
        pin = VersionPin(folder)
        cache.place(folder / MANIFEST, data)
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    return manifest, folder, pin


def _files(manifest: dict) -> tuple[dict[str, tuple[dict, bool]], list[list[str]]]:
    """Every file the manifest lists (object name -> (entry, fetched lazily)), and each
    shard's lazily fetched files: the shards' `.bin` payloads."""
    roles: dict[str, str] = {}
    for name, spec in manifest["fields"].items():
        roles.update(field_files(name, spec))
    listed: dict[str, tuple[dict, bool]] = {}
    per_shard = []
    for shard in manifest["shards"]:
        lazy = []
        for fname, entry in shard["files"].items():
            is_lazy = roles.get(fname) == "payload" and fname.endswith(".bin")
            listed[f"{shard['name']}/{fname}"] = (entry, is_lazy)
            if is_lazy:
                lazy.append(f"{shard['name']}/{fname}")
        per_shard.append(lazy)
    for spec in manifest["fields"].values():
        if CHECKSUM in spec and "file" in spec:  # a table, stored once per dataset
            listed[spec["file"]] = (spec, False)
    return listed, per_shard


def _check_sizes(remote: Remote, listed: dict[str, tuple[dict, bool]]) -> None:
    """A FormatError naming the first file the manifest says is larger than an object can be
    (a corrupt manifest: reserving its size in the node cache fails with EFBIG)."""
    for name, (entry, _) in listed.items():
        if entry["size"] > _MAX_OBJECT:
            raise FormatError(f"{remote.where(name)}: the manifest says it is {entry['size']} "
                              "bytes, more than an object in S3 can be (5 TiB); the manifest "
                              "is corrupt: re-convert the dataset there")


def _at_least(n: int) -> str:
    """`n` bytes for people, rounded up (a size to ask for must not fall short of `n`)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{math.ceil(n * 100 / scale) / 100:.2f} {unit}"
    return f"{n} B"


def _check_room(remote: Remote, cache: NodeCache, listed: dict, per_shard: list[list[str]],
                overhead: int) -> int:
    """The largest payload file's size, after checking that the limit holds what reading
    needs at least: the small files, one shard's payload files (a sample is read from all of
    them at once) and the version's bookkeeping (`overhead`: its manifest and payload list,
    plus the cache's running total). A limit that cannot can never read the dataset: said at
    once, not after waiting for room that never comes, and asking for no more than that."""
    largest = max((entry["size"] for entry, lazy in listed.values() if lazy), default=0)
    small = sum(entry["size"] for entry, lazy in listed.values() if not lazy)
    shard = max((sum(listed[name][0]["size"] for name in names) for names in per_shard),
                default=0)
    # every process reading from the cache (this one included) needs one shard at once
    n = 1 if cache.limit is None else cache.attached()
    need = small + n * shard + overhead + _USAGE_ROOM
    if cache.limit is not None and need > cache.limit:
        from chute.readers._sizes import format_size
        from chute.readers.storage._node_cache import CacheFullError

        each = "one shard's payload files" if n == 1 else \
            f"one shard's payload files for each of the {n} processes reading from this cache"
        raise CacheFullError(
            f"{remote.url}: cache_limit {format_size(cache.limit)} cannot hold this dataset's "
            f"manifest, indices and columns ({format_size(small + overhead)}) plus {each} "
            f"({n} x {format_size(shard)}); raise it to at least {_at_least(need)} "
            "(more lets shards be fetched ahead)")
    return largest


def open_remote(url: str, *, cache_dir=None, cache_limit=None,
                fingerprint: str | None = None, offline: bool = False) -> RemoteSource:
    """Fetch what opening the dataset at `url` needs into the node cache.

    Args:
        url: `s3://bucket/prefix` (or `gs://`, `az://`, `abfs://`) of a chute dataset.
        cache_dir: the node cache folder (default: CHUTE_DATA_CACHE, else chute's cache).
        cache_limit: bytes the cache may hold ("50GB"; default CHUTE_DATA_CACHE_LIMIT, else
            none).
        fingerprint: the version expected (a reopen): its cached manifest is used as is.
        offline: never ask the server (also `CHUTE_OFFLINE=1`): the newest version whose
            files are all in the cache is opened.
    """
    remote, cache = remote_of(url, cache_dir, cache_limit, offline=offline)
    manifest, folder, pin = _manifest(remote, cache, fingerprint)
    found = manifest_fingerprint(manifest)
    if fingerprint is not None and found != fingerprint:
        raise FormatError(f"{remote.url}: the dataset changed since it was opened (fingerprint "
                          f"{found}, expected {fingerprint}); restart the job on the new version")
    listed, per_shard = _files(manifest)
    _check_sizes(remote, listed)
    if cache.limit is not None:
        cache.attach()  # counted among the processes that share the limit
    text = "".join(f"{name}\n" for names in per_shard for name in names)
    largest = _check_room(remote, cache, listed, per_shard,
                          (folder / MANIFEST).stat().st_size + len(text.encode()))
    for shard in manifest["shards"]:
        (folder / shard["name"]).mkdir(exist_ok=True)
    cache.place(folder / PAYLOAD_LIST, text.encode())
    algo = manifest.get("checksum", CHECKSUM)

    def small(name: str) -> None:
        entry, _ = listed[name]
        path = folder / name
        cache.fetch(lambda temp: download_listed(remote, name, path, entry["size"],
                                                 entry.get(algo), temp=temp),
                    path, entry["size"])

    eager = [name for name, (_, lazy) in listed.items() if not lazy]
    with ThreadPoolExecutor(_PARALLEL) as pool:
        list(pool.map(small, eager))
    payload = {folder / name: RemoteFile(name, entry["size"], entry.get(algo))
               for name, (entry, lazy) in listed.items() if lazy}
    keep = None
    if cache.limit is not None and payload:
        # half the files that fit stay mapped, shared among the processes reading from the
        # cache; the other half is room for reading ahead
        keep = max(1, cache.limit // max(largest, 1) // 2 // cache.attached())
    from chute.readers.format._records import map_file

    files = ShardFiles(remote, cache, payload, keep, map_file)
    return RemoteSource(remote.url, folder, found, str(cache.root), cache.limit, files,
                        [[folder / n for n in names] for names in per_shard], pin, offline)


def verify_remote(url: str, *, progress: bool = False) -> list[str]:
    """`chute verify` of a dataset in object storage: the manifest's own checksum, then every
    listed object's size and checksum, streamed from the server (nothing is cached), then the
    structure (opening it through the node cache). A manifest or object that does not match is
    read again (bytes damaged on the way are not the object's): only a mismatch every one of
    `_VERIFY_READS` reads repeats is reported. Returns the problems, each naming its URL.

    Args:
        url: `s3://bucket/prefix` (or `gs://`, `az://`, `abfs://`) of the dataset.
        progress: show a progress bar of the bytes checked.
    """
    from tqdm import tqdm

    from chute.readers.format._manifest import MANIFEST_CHECKSUM, manifest_checksum
    from chute.readers.storage._object_store import StorageError

    remote = Remote(url)
    incoming = Path(tempfile.mkdtemp(prefix="chute-verify-"))
    problems = []
    try:
        for read in range(_VERIFY_READS):  # bytes damaged in flight are read again
            (incoming / MANIFEST).write_bytes(remote.get_bytes(MANIFEST))
            try:
                manifest = load_manifest(incoming)
            except FormatError as exc:
                if read + 1 < _VERIFY_READS:
                    continue
                return [f"{remote.where(MANIFEST)}: {str(exc).split(': ', 1)[-1]} "
                        f"({_VERIFY_READS} reads)"]
            own = manifest.get(MANIFEST_CHECKSUM)
            if own is None or own == manifest_checksum(manifest):
                break
        else:
            problems.append(f"{remote.where(MANIFEST)}: the manifest's own checksum does not "
                            f"match its content ({_VERIFY_READS} reads: edited or corrupted in "
                            "storage); re-convert the dataset there")
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    algo = manifest.get("checksum", CHECKSUM)
    listed, _ = _files(manifest)
    sizes = dict(remote.list())
    bar = tqdm(total=sum(e["size"] for e, _ in listed.values()), unit="B", unit_scale=True,
               disable=not progress, desc="verify")

    def check(item: tuple[str, tuple[dict, bool]]) -> str | None:
        name, (entry, _) = item
        where = remote.where(name)
        if name not in sizes:
            return f"{where}: missing"
        if sizes[name] != entry["size"]:
            return f"{where}: size {sizes[name]}, manifest says {entry['size']}"
        try:
            # a mismatch is read again (bytes damaged on the way are not the object's): only
            # one every read repeats condemns the object
            for _ in range(_VERIFY_READS):
                _, digest = remote.checksum(name)
                if digest == entry.get(algo):
                    return None
        except StorageError as exc:
            return str(exc)
        finally:
            bar.update(entry["size"])
        return (f"{where}: checksum mismatch in {_VERIFY_READS} reads (the object was modified "
                "or corrupted in storage)")

    with ThreadPoolExecutor(8) as pool:
        problems += [p for p in pool.map(check, sorted(listed.items())) if p]
    bar.close()
    if not problems:
        from chute.readers._dataset import Dataset

        try:
            Dataset.remote(url)
        except FormatError as exc:
            problems.append(str(exc))
    return problems

