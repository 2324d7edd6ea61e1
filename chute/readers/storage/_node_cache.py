"""The node cache of remote datasets: one folder shared by every process of a machine
(docs/storage.md, "The node cache").

- A file is downloaded once per node: whoever fetches it first holds its download lock, the
  others wait for it and then find it in place.
- A download is written under a temporary name, checked against the manifest's size and
  checksum, and only then renamed into place: nothing half-written is ever visible.
- The limit counts every file in the folder (downloads in progress count at their full size,
  reserved before they start), and room is made by deleting the least recently used evictable
  files (the shards' payload files). A file a process has in use holds a shared lock on its
  `.pin` file, and eviction takes only files whose pin it can lock exclusively: a shard in use
  is never evicted. When nothing can be evicted, a fetch waits for a reader to let go, up to
  `CHUTE_CACHE_WAIT_SECONDS` (default 600), then fails saying what limit is needed.
- Every version of a dataset (its manifest's fingerprint) has its own folder: a cache of
  another version is never used.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import xxhash

from chute.errors import ChuteError

__all__ = ["NodeCache", "CacheFullError", "PAYLOAD_LIST", "default_cache_dir",
           "default_cache_limit"]

PAYLOAD_LIST = ".payload"  # in a version folder: its evictable files, one relative path a line
_EVICT_LOCK = ".evict.lock"


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
            try:
                download(temp)
            finally:
                temp.unlink(missing_ok=True)
        return True

    @staticmethod
    def touch(path: Path) -> None:
        """Mark `path` used now (eviction takes the least recently used first)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)

    def _reserve(self, path: Path, size: int, wait: bool) -> Path | None:
        """A temporary file of `size` bytes beside `path`, created once the folder has room
        for it; None when it has none and `wait` is False."""
        deadline = time.monotonic() + _wait_seconds()
        while True:
            with _locked(self.root / _EVICT_LOCK, fcntl.LOCK_EX):
                if self._make_room(size):
                    temp = path.with_name(f".{path.name}.part-{os.getpid()}-"
                                          f"{os.urandom(3).hex()}")
                    with open(temp, "wb") as f:
                        f.truncate(size)  # counts at its full size while it downloads
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

    def usage(self) -> int:
        """Bytes of every file in the folder (temporary downloads at their reserved size);
        removes the temporary files of processes that died."""
        total = 0
        for folder, _, names in os.walk(self.root):
            for name in names:
                full = os.path.join(folder, name)
                pid = _part_pid(name)
                if pid is not None and not _alive(pid):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(full)
                    continue
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(full).st_size
        return total

    def _evictable(self) -> list[tuple[float, Path, int]]:
        """(last use, path, size) of every evictable file present, least recent first."""
        found = []
        for listing in self.root.glob(f"*/*/{PAYLOAD_LIST}"):
            folder = listing.parent
            try:
                names = listing.read_text().split("\n")
            except OSError:
                continue
            for name in names:
                if not name:
                    continue
                path = folder / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                found.append((st.st_mtime, path, st.st_size))
        found.sort(key=lambda t: t[0])
        return found

    def _make_room(self, size: int) -> bool:
        """Evict (least recently used first, never a pinned file) until `size` more bytes
        fit; True when they do. Call with the eviction lock held."""
        if self.limit is None:
            return True
        used = self.usage()
        if used + size <= self.limit:
            return True
        for _, path, nbytes in self._evictable():
            if self._evict(path):
                used -= nbytes
                if used + size <= self.limit:
                    return True
        return False

    def _evict(self, path: Path) -> bool:
        """Delete `path` unless a process has it pinned."""
        fd = os.open(_pin_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
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
        finally:
            os.close(fd)
