"""An exclusive lock on a dataset folder, held while it is written or its metadata updated
(docs/design.md, "Shard format"): `.NAME.lock` beside the folder, locked with flock(2).

The lock file is removed on release. Removing a lock file is only safe when a waiter notices
that the file it locked is no longer the one at the path, so `acquire` checks that the locked
file and the path are the same inode and starts again when they are not."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from chute.errors import ChuteError

__all__ = ["DestinationLock", "lock_path"]


def lock_path(path: Path) -> Path:
    """The lock file of dataset folder `path`."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


class DestinationLock:
    """Hold the lock of dataset folder `path` (a context manager; `release` ends it).

    Args:
        path: the dataset folder (it need not exist; its parent is created).
        purpose: what the holder does, for the message another process gets.
        wait: seconds to wait for another holder before giving up (0: fail at once).
    """

    def __init__(self, path: str | Path, *, purpose: str, wait: float = 0.0):
        self.path = Path(path)
        self.file = lock_path(self.path)
        self._fd: int | None = None
        deadline = time.monotonic() + wait
        while self._fd is None:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise ChuteError(
                        f"{self.path}: another process ({holder}) is writing this dataset "
                        f"(lock {self.file}); wait for it to finish or choose another "
                        "destination") from None
                time.sleep(0.05)
                continue
            if _same_file(fd, self.file):
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()}: {purpose}".encode())
                self._fd = fd
            else:  # the holder released and removed it meanwhile: lock the current file
                os.close(fd)

    def _open(self) -> int:
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ChuteError(f"{self.path}: cannot create its lock file {self.file} "
                             f"({exc.strerror or exc}); the folder that holds the dataset must "
                             "be a writable folder") from None

    def release(self) -> None:
        if self._fd is None:
            return
        self.file.unlink(missing_ok=True)  # before unlocking: see the module docstring
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DestinationLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        if self._fd is not None:
            os.close(self._fd)  # unlocks; the file stays for the next holder to reuse


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace") or "unknown pid"
    except OSError:
        return "unknown pid"
