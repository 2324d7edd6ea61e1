"""The node cache of remote datasets: one folder shared by every process of a machine
(docs/storage.md, "The node cache").

- A file is downloaded once per node: whoever fetches it first holds its download lock, the
  others wait for it and then find it in place.
- A download is written under a temporary name, checked against the manifest's size and
  checksum, and only then renamed into place: nothing half-written is ever visible.
- The limit counts every file in the folder (downloads in progress count at their full size,
  reserved before they start). The count is a running total in `.usage`, changed under the
  cache's lock by whoever adds or deletes a file, so a download costs a few small reads and
  writes, not a walk of the folder; the reservations of processes that died are given back
  at the next change, and the folder is counted file by file again when the total is missing
  or an hour old, or when room is short (at most every few seconds).
- Room is made by deleting the least recently used evictable files: the payload files of a
  version a process has open (a mapped one holds a shared lock on its `.pin` file, and
  eviction takes only files whose pin it can lock exclusively: a shard in use is never
  evicted), and every file of a version no process has open (each holds a shared lock on the
  version's `.version.pin` while it has it open): old versions' indices and manifests too.
  When nothing can be evicted, a fetch waits for a reader to let go, up to
  `CHUTE_CACHE_WAIT_SECONDS` (default 600), then fails saying what limit is needed.
- Every version of a dataset (its manifest's fingerprint) has its own folder: a cache of
  another version is never used.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import xxhash

from chute.errors import ChuteError
from chute.readers.storage._files import atomic_write_bytes

__all__ = ["NodeCache", "CacheFullError", "VersionPin", "PAYLOAD_LIST", "default_cache_dir",
           "default_cache_limit"]

PAYLOAD_LIST = ".payload"  # in a version folder: its evictable files, one relative path a line
_EVICT_LOCK = ".evict.lock"
_USAGE = ".usage"  # the running total (JSON), changed only under the eviction lock
_VERSION_PIN = ".version.pin"  # in a version folder: a shared lock while a process has it open
_RECOUNT_SECONDS = 3600.0  # the total is counted file by file again at least this often
_RECOUNT_SHORT = 5.0  # ... and, when short of room, at most this often


@dataclass
class _Usage:
    """The bytes of the cache folder: `files` in place, plus `parts` (temporary download
    name relative to the folder -> bytes reserved); `counted`: when last counted file by
    file (time.time())."""

    files: int
    parts: dict[str, int]
    counted: float

    @property
    def total(self) -> int:
        """Bytes of the folder: its files, reservations, and this total's own file."""
        return self.files + sum(self.parts.values()) + len(self.as_bytes())

    def as_bytes(self) -> bytes:
        return json.dumps({"files": self.files, "parts": self.parts,
                           "counted": self.counted}, sort_keys=True).encode()


class CacheFullError(ChuteError):
    """The cache limit cannot hold what is in use plus the file asked for."""


def default_cache_dir() -> Path:
    """`CHUTE_DATA_CACHE`, else the `data` folder of chute's cache folder."""
    from chute._cache_dir import cache_dir

    return Path(os.environ.get("CHUTE_DATA_CACHE") or cache_dir() / "data")


def default_cache_limit() -> int | None:
    """`CHUTE_DATA_CACHE_LIMIT` in bytes ("50GB", "200GiB"), else None (no limit)."""
    from chute.readers._sizes import parse_size

    text = os.environ.get("CHUTE_DATA_CACHE_LIMIT")
    if not text:
        return None
    try:
        return parse_size(text)
    except ValueError:
        raise ChuteError(f"CHUTE_DATA_CACHE_LIMIT={text!r} is not a size; write e.g. 50GB") \
            from None


def _wait_seconds() -> float:
    try:
        return float(os.environ.get("CHUTE_CACHE_WAIT_SECONDS", "600"))
    except ValueError:
        return 600.0


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _pin_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.pin")


def _part_pid(name: str) -> int | None:
    """The pid in a temporary download name `.NAME.part-PID-TOKEN`, else None."""
    if not name.startswith(".") or ".part-" not in name:
        return None
    try:
        return int(name.rsplit(".part-", 1)[1].split("-", 1)[0])
    except ValueError:
        return None


def _in_use(pin: Path) -> bool:
    """True while a process holds a shared lock on `pin`."""
    try:
        fd = os.open(pin, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False


def _entry(path: Path, *pins: Path) -> list[tuple[float, Path, int, tuple[Path, ...]]]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return []
    return [(st.st_mtime, path, st.st_size, pins)]


class VersionPin:
    """A shared lock on a version folder of the cache while a process has that version open:
    the eviction of its indices, manifest and listings waits until every holder let go.

    Args:
        folder: the version folder (created when absent).
    """

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(folder / _VERSION_PIN,
                                       os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_SH)  # waits while an eviction deletes its files

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.release()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class NodeCache:
    """A cache folder with an optional byte limit.

    Args:
        root: the folder (created when absent).
        limit: bytes the folder may hold; None: no limit.
    """

    def __init__(self, root: str | os.PathLike[str], limit: int | None = None):
        self.root = Path(root)
        self.limit = limit
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ChuteError(f"{self.root}: cannot create the dataset cache folder "
                             f"({exc.strerror or exc}); pass cache_dir= (or set "
                             "CHUTE_DATA_CACHE) to a writable folder") from None

    def version_folder(self, url: str, fingerprint: str) -> Path:
        """The folder of one version of the dataset at `url`."""
        return self.root / xxhash.xxh3_64_hexdigest(url.encode()) / fingerprint

    # -- pins ------------------------------------------------------------------------------
    def pin(self, path: Path) -> int:
        """A shared lock that keeps `path` from being evicted until `unpin`."""
        fd = os.open(_pin_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    @staticmethod
    def unpin(fd: int) -> None:
        os.close(fd)

    # -- fetching --------------------------------------------------------------------------
    def fetch(self, download, path: Path, size: int, *, wait: bool = True) -> bool:
        """Make `path` present: call `download(temp)` (which writes the checked file to
        `temp`, an existing file of `size` bytes reserved for it, then renames it to `path`)
        unless it is there already. Returns False only when `wait` is False and there is no
        room without waiting (a prefetch that can be tried later)."""
        if path.exists():
            self.touch(path)
            return True
        with _locked(path.with_name(f".{path.name}.dl"), fcntl.LOCK_EX):
            if path.exists():  # another process fetched it meanwhile
                self.touch(path)
                return True
            temp = self._reserve(path, size, wait)
            if temp is None:
                return False
            done = False
            try:
                download(temp)
                done = True
            finally:
                self._settle(temp, path, size, done)
        return True

    @staticmethod
    def touch(path: Path) -> None:
        """Mark `path` used now (eviction takes the least recently used first)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)

    def _reserve(self, path: Path, size: int, wait: bool) -> Path | None:
        """A temporary file of `size` bytes beside `path`, created (and counted) once the
        folder has room for it; None when it has none and `wait` is False."""
        deadline = time.monotonic() + _wait_seconds()
        while True:
            with self._usage() as state:
                if self._make_room(state, size):
                    temp = path.with_name(f".{path.name}.part-{os.getpid()}-"
                                          f"{os.urandom(3).hex()}")
                    with open(temp, "wb") as f:
                        f.truncate(size)  # counts at its full size while it downloads
                    state.parts[self._key(temp)] = size
                    return temp
            if not wait:
                return None
            if time.monotonic() > deadline:
                raise CacheFullError(
                    f"{self.root}: the cache limit ({self.limit} bytes) cannot hold the files in "
                    f"use plus {path.name} ({size} bytes) and none was released for "
                    f"{_wait_seconds():.0f} s; raise cache_limit (CHUTE_DATA_CACHE_LIMIT), "
                    "or read in shard windows (shuffle=ShardWindows(...)) so fewer shards are "
                    "in use at once")
            time.sleep(0.2)

    def _settle(self, temp: Path, path: Path, size: int, done: bool) -> None:
        """The reservation `temp` ends: its bytes now count as the file `path` when the
        download `done`, else they are given back."""
        with self._usage() as state:
            state.parts.pop(self._key(temp), None)
            temp.unlink(missing_ok=True)
            if done:
                try:
                    state.files += path.stat().st_size
                except FileNotFoundError:  # evicted at once by another process: it counted
                    state.files += size    # it off at the size the manifest gives it
        return None

    def place(self, path: Path, data: bytes) -> None:
        """Write the small file `path` (a manifest, a payload listing) once, atomically, and
        count it; a file already there is left as it is."""
        with self._usage() as state:
            if path.exists():
                self.touch(path)
                return
            atomic_write_bytes(path, data)
            state.files += len(data)

    def _key(self, path: Path) -> str:
        return os.path.relpath(path, self.root)

    # -- the running total -----------------------------------------------------------------
    @contextlib.contextmanager
    def _usage(self) -> Iterator[_Usage]:
        """The running total, under the cache's lock: read, purged of the reservations of
        processes that died, handed to the caller to change, and written back."""
        with _locked(self.root / _EVICT_LOCK, fcntl.LOCK_EX):
            state = self._read_usage()
            stored = None if state is None else state.as_bytes()
            if state is None or time.time() - state.counted > _RECOUNT_SECONDS:
                state = self._count()
            try:
                self._purge(state)
                yield state
            finally:  # what was done to the folder is counted even when the caller failed
                if state.as_bytes() != stored:
                    self._write_usage(state)

    def _read_usage(self) -> _Usage | None:
        try:
            data = json.loads((self.root / _USAGE).read_bytes())
            return _Usage(int(data["files"]), {str(k): int(v) for k, v in data["parts"].items()},
                          float(data["counted"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # none yet, or damaged: counted again

    def _write_usage(self, state: _Usage) -> None:
        temp = self.root / f"{_USAGE}.tmp-{os.getpid()}"
        temp.write_bytes(state.as_bytes())
        os.replace(temp, self.root / _USAGE)

    def _purge(self, state: _Usage) -> None:
        """Drop the reservations of processes that died: a temporary file left is deleted;
        one already renamed into place (the process died just after) counts as that file."""
        for key, size in list(state.parts.items()):
            pid = _part_pid(os.path.basename(key))
            if pid is not None and _alive(pid):
                continue
            del state.parts[key]
            temp = self.root / key
            try:
                temp.unlink()
            except FileNotFoundError:
                final = temp.with_name(temp.name[1:].rsplit(".part-", 1)[0])
                if final.exists():
                    state.files += size

    def _count(self) -> _Usage:
        """Count the folder file by file (when there is no running total yet, or it is old:
        it corrects any drift); removes the temporary files of processes that died."""
        files = 0
        parts: dict[str, int] = {}
        for folder, _, names in os.walk(self.root):
            for name in names:
                if name == _USAGE or name.startswith(f"{_USAGE}.tmp-"):
                    continue
                full = os.path.join(folder, name)
                pid = _part_pid(name)
                if pid is not None and not _alive(pid):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(full)
                    continue
                try:
                    size = os.stat(full).st_size
                except FileNotFoundError:
                    continue
                if pid is not None:
                    parts[self._key(Path(full))] = size
                else:
                    files += size
        return _Usage(files, parts, time.time())

    def usage(self) -> int:
        """Bytes the folder holds (downloads in progress at their reserved size), from the
        running total."""
        with self._usage() as state:
            return state.total

    def recount(self) -> int:
        """Bytes the folder holds, counted file by file (the running total is reset to it)."""
        with _locked(self.root / _EVICT_LOCK, fcntl.LOCK_EX):
            state = self._count()
            self._write_usage(state)
            return state.total

    # -- eviction --------------------------------------------------------------------------
    def _evictable(self) -> list[tuple[float, Path, int, tuple[Path, ...]]]:
        """(last use, path, size, its pin files) of every evictable file, least recent
        first: the payload files of a version in use (each file's own pin), and every file
        of a version no process has open (the version's pin): its indices and manifest too."""
        found = []
        for folder in self.root.glob("*/*"):
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            version_pin = folder / _VERSION_PIN
            if _in_use(version_pin):
                try:
                    names = (folder / PAYLOAD_LIST).read_text().split("\n")
                except OSError:
                    continue
                for name in names:
                    path = folder / name
                    if name:
                        found.extend(_entry(path, _pin_path(path)))
                continue
            for sub, _, files in os.walk(folder):
                for name in files:
                    if name.startswith(".") and name != PAYLOAD_LIST:
                        continue  # pins, download locks, temporary files
                    path = Path(sub, name)
                    own = _pin_path(path)  # a payload file's, if it was ever mapped
                    found.extend(_entry(path, version_pin, *([own] if own.exists() else [])))
        found.sort(key=lambda t: t[0])
        return found

    def _make_room(self, state: _Usage, size: int) -> bool:
        """Evict (least recently used first, never a pinned file) until `size` more bytes
        fit; True when they do. Call with the eviction lock held."""
        if self.limit is None or state.total + size <= self.limit:
            return True
        for _, path, nbytes, pins in self._evictable():
            if self._evict(path, pins):
                state.files -= nbytes
                if state.total + size <= self.limit:
                    return True
        if time.time() - state.counted > _RECOUNT_SHORT:
            # short of room: make sure it is not the running total that is off
            fresh = self._count()
            state.files, state.parts, state.counted = fresh.files, fresh.parts, fresh.counted
            return state.total + size <= self.limit
        return False

    def _evict(self, path: Path, pins: tuple[Path, ...]) -> bool:
        """Delete `path` unless a process holds one of its `pins`."""
        with contextlib.ExitStack() as held:
            for pin in pins:
                fd = os.open(pin, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                held.callback(os.close, fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        return False
                    raise
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            return True
