"""A dataset is written into a private folder beside its destination and put in place by a
rename at the end (docs/design.md, "Shard format"): a convert that is killed leaves the old
dataset (or none) whole, never a half-written one, and a replaced dataset is swapped with the
new one in one step (renameat2 RENAME_EXCHANGE where the kernel has it).

Names beside destination NAME: `.NAME.tmp-*` (a write in progress; the old dataset after a
swap), `.NAME.old-*` (the old dataset moved aside where no exchange exists) and `.NAME.del-*`
(a leftover being removed). All belong to whoever holds the destination's lock
(`convert/destination/_dest_lock.py`), which cleans them up."""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from pathlib import Path

from chute.errors import ChuteError
from chute.readers.format import MANIFEST
from chute.readers.storage import fsync_dir

__all__ = ["staging_folder", "clean_leftovers", "publish"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_TAGS = ("tmp", "old", "del")


def _aside(dest: Path, tag: str) -> Path:
    return dest.parent / f".{dest.name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}"


def staging_folder(dest: Path) -> Path:
    """A new, empty private folder beside `dest` to write the dataset into."""
    folder = _aside(dest, "tmp")
    folder.mkdir()
    return folder


def clean_leftovers(dest: Path) -> None:
    """Call with the lock held: put back an old dataset that an interrupted swap moved aside,
    and remove the folders of interrupted writes."""
    leftovers = [dest.parent / e.name for e in os.scandir(dest.parent)
                 if e.name.startswith(tuple(f".{dest.name}.{tag}-" for tag in _TAGS))]
    if not os.path.lexists(dest):
        moved = [p for p in leftovers if ".old-" in p.name and (p / MANIFEST).is_file()]
        if moved:
            os.rename(moved[0], dest)
            leftovers.remove(moved[0])
    for path in leftovers:
        # Renamed first: a killed Ray driver's workers can still be writing into its staging
        # folder by name (docs/ray.md, "Failures"); once the name is gone they cannot add to
        # the folder while it is removed, which would leave it behind.
        if ".del-" not in path.name:
            try:
                path = path.rename(_aside(dest, "del"))
            except FileNotFoundError:
                continue
        shutil.rmtree(path, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False when this system cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def publish(staging: Path, dest: Path, replace: bool) -> None:
    """Put the finished dataset in `staging` at `dest` (replacing the dataset there when
    `replace`), durably."""
    if replace and os.path.isdir(dest):
        if _exchange(staging, dest):
            fsync_dir(dest.parent)
            shutil.rmtree(staging, ignore_errors=True)  # now the old dataset
            return
        old = _aside(dest, "old")
        os.rename(dest, old)  # a kill from here to the next rename: clean_leftovers restores
        os.rename(staging, dest)
        fsync_dir(dest.parent)
        shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(staging, dest)  # dest is absent or an empty folder
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
        raise ChuteError(f"{dest}: something else was put there while the dataset was being "
                         "written, so it was not replaced; empty it and convert again") from None
    fsync_dir(dest.parent)
