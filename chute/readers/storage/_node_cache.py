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
- Processes sharing a limit: each holds a lock file in `.procs` while it lives, and pins at
  most half the limit over the processes counted there; a process waiting for room (or for
  another's download) lets go of the pins of the files it has mapped, so waiting processes
  never hold the room the others wait for (issue 37 item 9).
- Every version of a dataset (its manifest's fingerprint) has its own folder: a cache of
  another version is never used.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import xxhash

from chute.errors import ChuteError, DiskFullError
from chute.readers.storage._files import atomic_write_bytes
from chute.readers.storage._open_beneath import (
    open_dir_nofollow,
    open_file_nofollow,
    walk_nofollow,
)

__all__ = ["NodeCache", "CacheFullError", "VersionPin", "PAYLOAD_LIST", "default_cache_dir",
           "default_cache_limit", "cache_limit_bytes", "cache_name_problem", "RESERVED",
           "SHARED_ENV", "local_error"]

PAYLOAD_LIST = ".payload"  # in a version folder: its evictable files, one relative path a line
_EVICT_LOCK = ".evict.lock"
_USAGE = ".usage"  # the running total (JSON), changed only under the eviction lock
_VERSION_PIN = ".version.pin"  # in a version folder: a shared lock while a process has it open
_RECOUNT_SECONDS = 3600.0  # the total is counted file by file again at least this often
_RECOUNT_SHORT = 5.0  # ... and, when short of room, at most this often
_PROCS = ".procs"  # a lock file per process reading from the cache, locked while it lives
_PROC_NAME = re.compile(r"[0-9]{1,10}-[0-9a-f]{16}")
_MAX_PROCS = 1024  # lock files looked at (the count is at most this)
SHARED_ENV = "CHUTE_DATA_CACHE_SHARED"  # "1": a folder of another user is used all the same
# names the cache keeps for itself; a manifest naming a shard or file so is refused
RESERVED = frozenset({"chute.json", PAYLOAD_LIST, _EVICT_LOCK, _USAGE, _VERSION_PIN, _PROCS})
_MAX_NAME = 200  # bytes: the cache adds `.` + `.part-PID-TOKEN` and stays under NAME_MAX
_MAX_COUNT = 1 << 56  # bytes the bookkeeping may claim for one entry (as the manifest's sizes)
_PART = re.compile(r"\.(.+)\.part-(\d{1,10})-[0-9a-f]{1,32}")
_LOCAL_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                 errno.EMFILE, errno.ENFILE)


def local_error(root: Path, exc: OSError, path: Path) -> Exception:
    """A failure of the cache's disk (full, read-only, out of descriptors) while writing `path`
    as one line naming the cache folder `root`; any other error (and a ChuteError, already one
    line) is returned as it is.

    Args:
        root: the cache folder.
        exc: what writing raised.
        path: what was being written.
    """
    if isinstance(exc, ChuteError) or exc.errno not in _LOCAL_ERRORS:
        return exc
    name = os.path.relpath(path, root)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        error: Exception = DiskFullError(
            f"{root}: no space left on device while caching {name}; free space there, "
            "set a cache_limit (CHUTE_DATA_CACHE_LIMIT) below the free space, or pass "
            "cache_dir= (CHUTE_DATA_CACHE) elsewhere")
    elif exc.errno in (errno.EMFILE, errno.ENFILE):
        error = ChuteError(f"{root}: too many open files while caching {name} "
                           f"({exc.strerror}); raise the limit (ulimit -n)")
    else:
        error = ChuteError(f"{root}: cannot write the dataset cache folder "
                           f"({exc.strerror or exc}) while caching {name}; pass cache_dir= "
                           "(or set CHUTE_DATA_CACHE) to a writable folder")
    error.errno = exc.errno  # type: ignore[attr-defined]
    return error


def cache_name_problem(name) -> str | None:
    """Why `name` cannot be a shard folder or file name in the node cache (None when it
    can): one plain component, printable, at most 200 bytes, not hidden (the cache's own
    files start with "."), not a name the cache keeps (`chute.json`, ...)."""
    if not isinstance(name, str) or name in ("", ".", ".."):
        return "is not a name"
    if any(c in name for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a '/', a backslash or a control character (newline, NUL, ...)"
    if len(name.encode("utf-8", "surrogateescape")) > _MAX_NAME:
        return f"is longer than {_MAX_NAME} bytes"
    if name.startswith(".") or name in RESERVED:
        return "is reserved (names starting with '.', and chute.json, are chute's own files)"
    return None


def _components(key: str) -> tuple[str, ...] | None:
    """The path components of `key` (relative to the cache folder), read from the cache's
    own bookkeeping: None unless every one is a plain name (no "..", "/", control
    characters), so that nothing read from a file of the cache leads out of it."""
    if not isinstance(key, str):
        return None
    parts = tuple(key.split("/"))
    for part in parts:
        if part in ("", ".", "..") or "\\" in part or len(part.encode("utf-8", "surrogateescape")) \
                > 255 or any(ord(c) < 32 or ord(c) == 127 for c in part):
            return None
    return parts


def cache_limit_bytes(value, source: str = "cache_limit") -> int | None:
    """`value` ("50GB", "200GiB", a positive int, None) in bytes; anything else (a float, NaN,
    a list, a number of 5,000 digits) is a one-line ChuteError naming `source`."""
    from chute.readers._sizes import parse_size

    if value is None:
        return None
    fix = f"{source} must be a positive size such as '50GB' or 500000000000"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ChuteError(f"{source}={value!r:.60} is a {type(value).__name__}, not a size; {fix}")
    if isinstance(value, str) and len(value) > 40:
        raise ChuteError(f"{source}={value[:40]!r}... ({len(value)} characters) is not a "
                         f"size; {fix}")
    try:
        limit = parse_size(value)
    except (ValueError, OverflowError):
        raise ChuteError(f"{source}={value!r} is not a size; {fix}") from None
    if not 0 < limit < _MAX_COUNT:
        raise ChuteError(f"{source}={value!r} is out of range; {fix}")
    return limit


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
    text = os.environ.get("CHUTE_DATA_CACHE_LIMIT")
    if not text:
        return None
    return cache_limit_bytes(text, "CHUTE_DATA_CACHE_LIMIT")


def _wait_seconds() -> float:
    try:
        return float(os.environ.get("CHUTE_CACHE_WAIT_SECONDS", "600"))
    except ValueError:
        return 600.0


def _open_lock(path: Path) -> int:
    """The lock (or pin) file `path`, created when absent; a symlink, FIFO or folder found
    there instead (never followed) is deleted first."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EWOULDBLOCK):
            raise
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            os.rmdir(path)  # one holding files is refused below
        else:
            os.unlink(path)
    return os.open(path, flags | os.O_EXCL, 0o644)


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _pin_name(name: str) -> str:
    return f".{name}.pin"


def _pin_path(path: Path) -> Path:
    return path.with_name(_pin_name(path.name))


def _part_pid(name: str) -> int | None:
    """The pid in a temporary download name `.NAME.part-PID-TOKEN`, else None."""
    match = _PART.fullmatch(name)
    return int(match.group(2)) if match else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False  # 0 and negative pids name process groups, never a downloader
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


class _Pin:
    """A pin this process holds (`NodeCache.pin`): `fresh` until the file is opened to be
    mapped (then the mapping holds it, and the lock may be let go while room is short);
    `locked` while its shared lock is held; `size` once known."""

    __slots__ = ("fd", "path", "fresh", "locked", "size")

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path
        self.fresh, self.locked = True, True
        self.size: int | None = None


# cache folder -> (pid, descriptor of its lock file in `.procs`): one per process and folder
_ATTACHED: dict[str, tuple[int, int]] = {}
_ATTACH_LOCK = threading.Lock()
_CACHES: weakref.WeakSet[NodeCache] = weakref.WeakSet()  # their pin locks, fresh after fork


def _after_fork() -> None:
    """In a forked child: locks another thread of the parent held are free again."""
    global _ATTACH_LOCK
    _ATTACH_LOCK = threading.Lock()
    for cache in list(_CACHES):
        cache._pins_lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork)


class VersionPin:
    """A shared lock on a version folder of the cache while a process has that version open:
    the eviction of its indices, manifest and listings waits until every holder let go.

    Args:
        folder: the version folder (created when absent).
    """

    def __init__(self, folder: Path):
        for link in (folder.parent, folder):  # the URL's and the version's folders
            if link.is_symlink():  # never followed: what it leads to is not the cache's
                link.unlink()
        self._fd: int | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._fd = _open_lock(folder / _VERSION_PIN)
        except OSError as exc:  # a full or read-only cache disk: one line naming it
            raise local_error(folder.parent.parent, exc, folder / _VERSION_PIN) from None
        fcntl.flock(self._fd, fcntl.LOCK_SH)  # waits while an eviction deletes its files

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.release()


def _shared_env() -> bool:
    return os.environ.get(SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class NodeCache:
    """A cache folder with an optional byte limit.

    The folder must belong to this user and not be writable by every user, unless `shared`
    (default: `CHUTE_DATA_CACHE_SHARED=1`) says it is meant to be shared: its files are
    mapped as data, and whoever can write it decides what they hold (docs/storage.md).

    Args:
        root: the folder (created when absent).
        limit: bytes the folder may hold; None: no limit.
        shared: the folder may belong to another user.
    """

    def __init__(self, root: str | os.PathLike[str], limit: int | None = None, *,
                 shared: bool | None = None):
        self.root = Path(root)
        self.limit = limit
        self.shared = _shared_env() if shared is None else shared
        self._pins: dict[int, _Pin] = {}  # this process's pins, oldest first
        self._pins_lock = threading.RLock()
        self._procs = (0.0, 1)  # (when counted, processes reading from the cache)
        _CACHES.add(self)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            st = os.stat(self.root)
        except OSError as exc:
            raise ChuteError(f"{self.root}: cannot create the dataset cache folder "
                             f"({exc.strerror or exc}); pass cache_dir= (or set "
                             "CHUTE_DATA_CACHE) to a writable folder") from None
        if not self.shared:
            if st.st_uid != os.geteuid():
                raise ChuteError(
                    f"{self.root}: the dataset cache folder belongs to another user (uid "
                    f"{st.st_uid}), who decides what its files hold; pass cache_dir= (or set "
                    f"CHUTE_DATA_CACHE) to a folder of your own, or set {SHARED_ENV}=1 if it "
                    "is meant to be shared")
            if st.st_mode & stat.S_IWOTH:
                raise ChuteError(
                    f"{self.root}: the dataset cache folder is writable by every user, who "
                    "could replace its files; pass cache_dir= (or set CHUTE_DATA_CACHE) to a "
                    f"folder of your own, or set {SHARED_ENV}=1 if it is meant to be shared")

    def version_folder(self, url: str, fingerprint: str) -> Path:
        """The folder of one version of the dataset at `url`."""
        return self.root / xxhash.xxh3_64_hexdigest(url.encode()) / fingerprint

    def _rel(self, path: Path) -> tuple[str, ...]:
        """The components of `path` below the cache folder; ValueError when it is not below."""
        parts = _components(os.path.relpath(path, self.root).replace(os.sep, "/"))
        if parts is None:
            raise ValueError(f"{path} is not a file of the cache folder {self.root}")
        return parts

    @contextlib.contextmanager
    def _folder_of(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the folder holding `parts` (the last one is its entry), every
        component below the cache folder opened without following a symlink."""
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_dir_nofollow(root, parts[:-1])
        finally:
            os.close(root)
        try:
            yield fd
        finally:
            os.close(fd)

    def _lstat(self, path: Path) -> os.stat_result | None:
        """`path`'s own status (a symlink is itself), reached through no symlink; None when
        absent or reached through one."""
        parts = self._rel(path)
        try:
            with self._folder_of(parts) as folder:
                return os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        except OSError:
            return None

    def _remove(self, parts: tuple[str, ...]) -> int | None:
        """Delete the entry `parts` of the cache folder without following any symlink (a
        folder found there is deleted with what it holds); its bytes, None when absent."""
        try:
            with self._folder_of(parts) as folder:
                st = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    size = self._remove_tree(folder, parts[-1])
                else:
                    os.unlink(parts[-1], dir_fd=folder)
                    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                return size
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return None  # reached through a link: not the cache's to delete
            raise

    @staticmethod
    def _remove_tree(parent: int, name: str) -> int:
        sub = open_dir_nofollow(parent, (name,))
        size = 0
        try:
            for entry in os.listdir(sub):
                st = os.stat(entry, dir_fd=sub, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    size += NodeCache._remove_tree(sub, entry)
                else:
                    os.unlink(entry, dir_fd=sub)
                    size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=parent)
        return size

    # -- pins ------------------------------------------------------------------------------
    def pin(self, path: Path) -> int:
        """A shared lock that keeps `path` from being evicted until `unpin`. Once the file
        is mapped, the pins of this process beyond its share of the limit (half the limit
        over the processes reading from the cache) are let go, oldest first: a mapping
        stays valid when its file is evicted, and processes sharing the cache never pin
        more than it holds."""
        self._real_folders(self._rel(path)[:-1])
        if self.limit is not None:
            self.attach()
        fd = _open_lock(_pin_path(path))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        with self._pins_lock:
            self._pins[fd] = _Pin(fd, path)
        self._trim()
        return fd

    def unpin(self, fd: int) -> None:
        with self._pins_lock:
            self._pins.pop(fd, None)
            os.close(fd)

    def _trim(self) -> None:
        """Let go of the locks of this process's mapped files beyond its share, oldest
        first (their pins stay open until `unpin`)."""
        if self.limit is None:
            return
        budget = self.limit // 2 // self.attached()
        with self._pins_lock:
            held = [p for p in self._pins.values() if p.locked and not p.fresh]
            kept = 0
            for pin in reversed(held):  # newest first
                if pin.size is None:
                    st = self._lstat(pin.path)
                    if st is None or not stat.S_ISREG(st.st_mode):
                        continue  # nothing there (evicted): counts nothing
                    pin.size = st.st_size
                kept += pin.size
                if kept > budget:
                    fcntl.flock(pin.fd, fcntl.LOCK_UN)
                    pin.locked = False

    def _let_go(self, path: Path) -> list[_Pin]:
        """While this process waits for room (or for another's download): let go of the
        locks of its mapped files (their mappings stay valid), all but `path`'s."""
        released = []
        with self._pins_lock:
            for pin in self._pins.values():
                if pin.locked and not pin.fresh and pin.path != path:
                    fcntl.flock(pin.fd, fcntl.LOCK_UN)
                    pin.locked = False
                    released.append(pin)
        return released

    def _take_back(self, released: list[_Pin]) -> None:
        """Lock again the pins `_let_go` let go that are still held, within the share."""
        if not released:
            return
        with self._pins_lock:
            for pin in released:
                if self._pins.get(pin.fd) is pin and not pin.locked:
                    fcntl.flock(pin.fd, fcntl.LOCK_SH)
                    pin.locked = True
        self._trim()

    # -- processes reading from the cache --------------------------------------------------
    def attach(self) -> None:
        """Hold this process's lock file in `.procs` (once per process and cache folder; a
        process forked from one that held it takes its own)."""
        key = str(self.root.resolve())
        with _ATTACH_LOCK:
            held = _ATTACHED.get(key)
            if held is not None and held[0] == os.getpid():
                return
            if held is not None:  # inherited through fork: the parent's, not ours
                with contextlib.suppress(OSError):
                    os.close(held[1])
                del _ATTACHED[key]
            self._real_folders((_PROCS,))
            name = f"{os.getpid()}-{os.urandom(8).hex()}"
            with self._folder_of((_PROCS, name)) as folder:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                             os.O_CLOEXEC, 0o644, dir_fd=folder)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _ATTACHED[key] = (os.getpid(), fd)
            self._procs = (0.0, 1)

    def attached(self) -> int:
        """The processes reading from the cache (at least 1): the lock files of `.procs` a
        live process holds, counted at most every second; those of processes that died are
        deleted, and anything else found there (a name chute does not give, a symlink, a
        folder) is ignored."""
        when, count = self._procs
        if time.monotonic() - when < 1.0:
            return count
        count = 0
        try:
            with self._folder_of((_PROCS, "x")) as folder:
                for name in sorted(os.listdir(folder))[:_MAX_PROCS]:
                    if not _PROC_NAME.fullmatch(name):
                        continue
                    try:
                        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK |
                                     os.O_CLOEXEC, dir_fd=folder)
                    except OSError:
                        continue
                    try:
                        if not stat.S_ISREG(os.fstat(fd).st_mode):
                            continue
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except OSError as exc:
                            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                                count += 1  # a live process holds it
                            continue
                        with contextlib.suppress(OSError):
                            os.unlink(name, dir_fd=folder)  # its process died
                    finally:
                        os.close(fd)
        except OSError:
            pass
        count = max(count, 1)
        self._procs = (time.monotonic(), count)
        return count

    # -- fetching --------------------------------------------------------------------------
    def _present(self, path: Path, size: int | None) -> bool:
        """True when `path` is a regular file (of `size` bytes when given), reached through
        no symlink."""
        st = self._lstat(path)
        return st is not None and stat.S_ISREG(st.st_mode) and \
            (size is None or st.st_size == size)

    def fetch(self, download, path: Path, size: int, *, wait: bool = True) -> bool:
        """Make `path` present: call `download(temp)` (which writes the checked file to
        `temp`, an existing file of `size` bytes reserved for it, then renames it to `path`)
        unless a regular file of `size` bytes is there already (anything else found there, a
        symlink, a FIFO, a folder, a file of another size, is deleted first). Returns False
        only when `wait` is False and there is no room without waiting (a prefetch that can
        be tried later)."""
        if self._present(path, size):
            self.touch(path)
            return True
        try:
            self._real_folders(self._rel(path)[:-1])
            with self._download_lock(path):
                if self._present(path, size):  # another process fetched it meanwhile
                    self.touch(path)
                    return True
                self.discard(path)
                temp = self._reserve(path, size, wait)
                if temp is None:
                    return False
                done = False
                try:
                    download(temp)
                    done = True
                finally:
                    self._settle(temp, path, size, done)
        except OSError as exc:
            raise self._local_error(exc, path) from None
        return True

    @contextlib.contextmanager
    def _download_lock(self, path: Path) -> Iterator[None]:
        """The download lock of `path`; while another process holds it (and may be waiting
        for room), this one lets go of its mapped files' pins."""
        fd = _open_lock(path.with_name(f".{path.name}.dl"))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                released = self._let_go(path)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                finally:
                    self._take_back(released)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _local_error(self, exc: OSError, path: Path) -> Exception:
        """A failure of the cache's disk as one line naming the cache folder (a ChuteError
        already is one, and passes)."""
        return local_error(self.root, exc, path)

    def discard(self, path: Path) -> None:
        """Delete whatever is at `path` (a damaged file, a symlink, a folder) and count it
        off; call with its download lock held, or when it is known to be wrong."""
        parts = self._rel(path)
        with self._usage() as state:
            size = self._remove(parts)
            if size:
                state.files = max(state.files - size, 0)

    def open_mapped(self, path: Path) -> int:
        """A read-only descriptor of the cached file `path`, reached through no symlink and
        opened without blocking (a FIFO does not wait); OSError when it cannot be."""
        parts = self._rel(path)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_file_nofollow(root, parts)
        finally:
            os.close(root)
        with self._pins_lock:  # the descriptor holds the file now: its pins may let go
            for pin in self._pins.values():
                if pin.path == path:
                    pin.fresh = False
        return fd

    def trusted(self, st: os.stat_result, size: int) -> bool:
        """Whether the file of status `st` may be mapped as a cached file of `size` bytes: a
        regular file of that size that no one but its owner can write, owned by this user
        (in a shared cache: by any user). Files the cache writes are made read-only, and
        chute never shrinks one in place: nobody else can shrink it under a live mapping
        (docs/storage.md, "The node cache")."""
        return stat.S_ISREG(st.st_mode) and st.st_size == size and \
            not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and \
            (self.shared or st.st_uid == os.geteuid())

    @staticmethod
    def touch(path: Path) -> None:
        """Mark `path` used now (eviction takes the least recently used first)."""
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)

    def _reserve(self, path: Path, size: int, wait: bool) -> Path | None:
        """A temporary file of `size` bytes beside `path`, created (and counted) once the
        folder has room for it; None when it has none and `wait` is False."""
        deadline = time.monotonic() + _wait_seconds()
        released: list[_Pin] = []
        try:
            return self._reserve_waiting(path, size, wait, deadline, released)
        finally:
            self._take_back(released)

    def _reserve_waiting(self, path: Path, size: int, wait: bool, deadline: float,
                         released: list[_Pin]) -> Path | None:
        while True:
            with self._usage() as state:
                if self._make_room(state, size):
                    temp = path.with_name(f".{path.name}.part-{os.getpid()}-"
                                          f"{os.urandom(3).hex()}")
                    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                                 os.O_CLOEXEC, 0o644)
                    try:
                        os.ftruncate(fd, size)  # counts at its full size while it downloads
                    finally:
                        os.close(fd)
                    state.parts[self._key(temp)] = size
                    return temp
            if not wait:
                return None
            if time.monotonic() > deadline:
                n = self.attached()
                raise CacheFullError(
                    f"{self.root}: the cache limit ({self.limit} bytes) cannot hold the files in "
                    f"use plus {path.name} ({size} bytes) and none was released for "
                    f"{_wait_seconds():.0f} s ({n} process{'es' if n > 1 else ''} reading from "
                    "the cache, each needing one shard's payload files at once); raise "
                    "cache_limit (CHUTE_DATA_CACHE_LIMIT), or read in shard windows "
                    "(order=ShardWindows(...)) so fewer shards are in use at once")
            # waiting: this process's mapped files need no pin (their mappings stay valid),
            # and another process may need their room to let go of its own
            released += self._let_go(path)
            time.sleep(0.05 + 0.15 * (os.urandom(1)[0] / 255))

    def _settle(self, temp: Path, path: Path, size: int, done: bool) -> None:
        """The reservation `temp` ends: its bytes now count as the file `path` when the
        download `done` (made read-only: see `trusted`), else they are given back."""
        with self._usage() as state:
            state.parts.pop(self._key(temp), None)
            self._remove(self._rel(temp))
            if done:
                with contextlib.suppress(OSError):
                    fd = self.open_mapped(path)
                    try:
                        os.fchmod(fd, 0o444)
                    finally:
                        os.close(fd)
                st = self._lstat(path)
                if st is not None and stat.S_ISREG(st.st_mode):
                    state.files += st.st_size
                else:  # evicted at once by another process: it counted it off at the size
                    state.files += size  # the manifest gives it
        return None

    def place(self, path: Path, data: bytes) -> None:
        """Write the small file `path` (a manifest, a payload listing) once, atomically, and
        count it; a regular file already there holding `data` is left as it is (anything
        else, a damaged copy included, is replaced)."""
        try:
            self._real_folders(self._rel(path)[:-1])
            with self._usage() as state:
                if self._present(path, len(data)) and self._holds(path, data):
                    self.touch(path)
                    return
                size = self._remove(self._rel(path))
                if size:
                    state.files = max(state.files - size, 0)
                atomic_write_bytes(path, data)
                state.files += len(data)
        except OSError as exc:
            raise self._local_error(exc, path) from None

    def _real_folders(self, parts: tuple[str, ...]) -> None:
        """Make every folder of `parts` below the cache folder a real one: a symlink (or
        anything else) found in place of one is deleted (never followed), an absent one
        created; what is then written there by name stays inside the cache folder."""
        for depth in range(1, len(parts) + 1):
            st = self._lstat(self.root.joinpath(*parts[:depth]))
            if st is not None and stat.S_ISDIR(st.st_mode):
                continue
            if st is not None:
                self._remove(parts[:depth])
            with self._folder_of(parts[:depth]) as folder, \
                    contextlib.suppress(FileExistsError):
                os.mkdir(parts[depth - 1], 0o755, dir_fd=folder)

    def _holds(self, path: Path, data: bytes) -> bool:
        try:
            fd = self.open_mapped(path)
        except OSError:
            return False
        try:
            with open(fd, "rb", closefd=False) as f:
                return f.read(len(data) + 1) == data
        finally:
            os.close(fd)

    def _key(self, path: Path) -> str:
        return "/".join(self._rel(path))

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
        """The running total when it parses and is plausible; None (counted again) when it
        is absent or anything in it is not: counts that are not byte counts, a `counted`
        in the future or not a time, a reservation naming no temporary download file."""
        try:
            fd = os.open(self.root / _USAGE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK |
                         os.O_CLOEXEC)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                raw = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
            data = json.loads(raw)
            files, parts_, counted = data["files"], data["parts"], data["counted"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None  # none yet, or damaged: counted again

        def count(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and \
                0 <= value < _MAX_COUNT
        if not count(files) or not isinstance(parts_, dict) or \
                not isinstance(counted, (int, float)) or isinstance(counted, bool) or \
                not math.isfinite(counted) or not 0 < counted <= time.time() + 60:
            return None
        for key, size in parts_.items():
            names = _components(key)
            if names is None or _part_pid(names[-1]) is None or not count(size):
                return None
        return _Usage(files, dict(parts_), float(counted))

    def _write_usage(self, state: _Usage) -> None:
        temp = self.root / f"{_USAGE}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        try:
            os.write(fd, state.as_bytes())
        finally:
            os.close(fd)
        st = self._lstat(self.root / _USAGE)
        if st is not None and stat.S_ISDIR(st.st_mode):  # never a folder: made one by hand
            self._remove((_USAGE,))
        os.replace(temp, self.root / _USAGE)

    def _purge(self, state: _Usage) -> None:
        """Drop the reservations of processes that died: a temporary file left is deleted;
        one already renamed into place (the process died just after) counts as that file.
        Keys were checked when read (`_read_usage`): each names a temporary download file
        inside the folder, deleted through no symlink."""
        for key, size in list(state.parts.items()):
            parts = _components(key)
            pid = None if parts is None else _part_pid(parts[-1])
            if pid is not None and _alive(pid):
                continue
            del state.parts[key]
            if parts is None or pid is None:
                continue
            if self._remove(parts) is None:
                match = _PART.fullmatch(parts[-1])
                final = (*parts[:-1], match.group(1)) if match else None
                if final is not None and self._present(self.root.joinpath(*final), None):
                    state.files += size

    def _count(self) -> _Usage:
        """Count the folder file by file (when there is no running total yet, or it is old:
        it corrects any drift), never following a symlink; removes the temporary files of
        processes that died."""
        files = 0
        parts: dict[str, int] = {}
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for names, name, st, folder in walk_nofollow(root):
                if names == (_USAGE,) or (len(names) == 1 and name.startswith(f"{_USAGE}.tmp-")):
                    continue
                size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                pid = _part_pid(name)
                if pid is not None and not _alive(pid):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=folder)
                    continue
                if pid is not None:
                    parts["/".join(names)] = size
                else:
                    files += size
        finally:
            os.close(root)
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
    def _evictable(self) -> list[tuple[float, tuple[str, ...], int, tuple[tuple[str, ...], ...]]]:
        """(last use, path components, size, its pin files) of every evictable file, least
        recent first: the payload files of a version in use (each file's own pin), and every
        file of a version no process has open (the version's pin): its indices and manifest
        too. Folders are walked without following a symlink, and the names a payload
        listing holds are used only when they are `SHARD/FILE` (or FILE) of plain names."""
        found = []
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for url in _subfolders(root):
                try:
                    url_fd = open_dir_nofollow(root, (url,))
                except OSError:
                    continue
                try:
                    for version in _subfolders(url_fd):
                        found += self._evictable_in(url_fd, (url, version))
                finally:
                    os.close(url_fd)
        finally:
            os.close(root)
        found.sort(key=lambda t: t[0])
        return found

    def _evictable_in(self, parent: int, where: tuple[str, str]) -> list:
        found: list = []
        try:
            folder = open_dir_nofollow(parent, (where[1],))
        except OSError:
            return found
        try:
            version_pin = (*where, _VERSION_PIN)
            if _in_use(folder, _VERSION_PIN):
                for line in _read_listing(folder):
                    names = _components(line)
                    if names is None or len(names) > 2 or \
                            any(cache_name_problem(n) for n in names):
                        continue  # not a name a manifest can give: not the listing's
                    found.extend(self._entry(folder, names, where, (_pin_name(names[-1]),)))
                return found
            for names, name, st, _ in walk_nofollow(folder):
                if name.startswith(".") and name != PAYLOAD_LIST:
                    continue  # pins, download locks, temporary files
                own = (*names[:-1], _pin_name(name))  # a payload file's, if it was ever mapped
                found.append((st.st_mtime, (*where, *names), st.st_size if
                              stat.S_ISREG(st.st_mode) else 0, (version_pin, (*where, *own))))
        finally:
            os.close(folder)
        return found

    @staticmethod
    def _entry(folder: int, names: tuple[str, ...], where: tuple[str, str],
               pin: tuple[str]) -> list:
        try:
            sub = open_dir_nofollow(folder, names[:-1])
        except OSError:
            return []
        try:
            st = os.stat(names[-1], dir_fd=sub, follow_symlinks=False)
        except OSError:
            return []
        finally:
            os.close(sub)
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        return [(st.st_mtime, (*where, *names), size, ((*where, *names[:-1], *pin),))]

    def _make_room(self, state: _Usage, size: int) -> bool:
        """Evict (least recently used first, never a pinned file) until `size` more bytes
        fit; True when they do. Call with the eviction lock held."""
        if self.limit is None or state.total + size <= self.limit:
            return True
        for _, parts, _, pins in self._evictable():
            freed = self._evict(parts, pins)
            if freed is not None:
                state.files = max(state.files - freed, 0)
                if state.total + size <= self.limit:
                    return True
        if time.time() - state.counted > _RECOUNT_SHORT:
            # short of room: make sure it is not the running total that is off
            fresh = self._count()
            state.files, state.parts, state.counted = fresh.files, fresh.parts, fresh.counted
            return state.total + size <= self.limit
        return False

    def _evict(self, parts: tuple[str, ...], pins: tuple[tuple[str, ...], ...]) -> int | None:
        """Delete `parts` unless a process holds one of its `pins` (a pin that cannot be
        opened without following a symlink keeps the file); its bytes, None when kept."""
        with contextlib.ExitStack() as held:
            for pin in pins:
                try:
                    with self._folder_of(pin) as folder:
                        fd = os.open(pin[-1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                                     os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=folder)
                except OSError:
                    return None
                held.callback(os.close, fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        return None
                    raise
            return self._remove(parts)


def _subfolders(fd: int) -> list[str]:
    """The names of the real folders (not symlinks) in the folder open as `fd`, hidden ones
    (`.incoming-*`) left out."""
    try:
        names = os.listdir(fd)
    except OSError:
        return []
    found = []
    for name in names:
        if name.startswith("."):
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                found.append(name)
    return found


def _in_use(folder: int, name: str) -> bool:
    """True while a process holds a shared lock on the pin `name` in `folder`."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
    except OSError:
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


def _read_listing(folder: int) -> list[str]:
    """The lines of the version's payload listing (a regular file reached through no link,
    at most 64 MiB read); none when it is anything else."""
    try:
        fd = os.open(PAYLOAD_LIST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with open(fd, "rb", closefd=False) as f:
            data = f.read(64 << 20)
    except OSError:
        return []
    finally:
        os.close(fd)
    return data.decode("utf-8", "surrogateescape").split("\n")
