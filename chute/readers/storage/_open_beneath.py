"""Open a file under a folder with the kernel refusing any resolution that leaves the folder:
Linux's openat2(RESOLVE_BENEATH), one system call like a plain open, so checking that a chunk
file stays inside its zarr store costs nothing per chunk (docs/design.md, "Zarr groups").

Elsewhere (other systems, kernels before 5.6, sandboxes that block the call) `available()` is
False and callers check the resolved path instead (`_paths.Confined`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from functools import cache

__all__ = ["available", "open_beneath", "opener", "RESOLVE_BENEATH", "open_dir_nofollow",
           "open_file_nofollow", "walk_nofollow"]

RESOLVE_BENEATH = 0x08  # linux/openat2.h
# openat2's number in the unified system call table (since Linux 5.6); other architectures
# keep their own tables and are left to the fallback
_SYS_OPENAT2 = 437
_MACHINES = ("x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "i686",
             "i386", "armv7l")


class _How(ctypes.Structure):  # struct open_how
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


# O_NONBLOCK: opening a FIFO must not wait for a writer (the caller fstat()s and refuses it);
# reads of a regular file ignore the flag
_HOW = _How(os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0), 0,
            RESOLVE_BENEATH)
_HOW_REF = ctypes.byref(_HOW)
_HOW_SIZE = ctypes.sizeof(_HOW)


@cache
def _syscall():
    if not sys.platform.startswith("linux") or platform.machine().lower() not in _MACHINES:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


def open_beneath(dir_fd: int, relative: bytes) -> int:
    """A read-only descriptor of `relative` under the folder open as `dir_fd`; OSError as
    open(2) raises it, EXDEV when the path (through `..` or a symlink, absolute ones included)
    resolves outside. Call only when `available()`.

    Args:
        dir_fd: a descriptor of the folder.
        relative: the path under it (bytes, not absolute).
    """
    return opener(dir_fd)(relative)


def opener(dir_fd: int):
    """`open_beneath` bound to `dir_fd`, with the call's other arguments made once: a chunk
    read calls it per chunk, so it adds no Python work over `os.open`.

    Args:
        dir_fd: a descriptor of the folder.
    """
    syscall, get_errno = _syscall(), ctypes.get_errno

    def open_under(relative: bytes) -> int:
        fd = syscall(_SYS_OPENAT2, dir_fd, relative, _HOW_REF, _HOW_SIZE)
        if fd < 0:
            code = get_errno()
            raise OSError(code, os.strerror(code), relative.decode(errors="replace"))
        return fd

    return open_under


@cache
def available() -> bool:
    """Whether `open_beneath` works here: probed once per process on a folder of this module,
    where "." must open and ".." must be refused."""
    if _syscall() is None:
        return False
    folder = os.open(os.path.dirname(os.path.abspath(__file__)), os.O_RDONLY)
    try:
        os.close(open_beneath(folder, b"."))
        try:
            os.close(open_beneath(folder, b".."))
            return False
        except OSError as exc:
            return exc.errno == errno.EXDEV
    except OSError:
        return False  # ENOSYS (old kernel) or EPERM (a sandbox filtering the call)
    finally:
        os.close(folder)


# -- folders walked without following links (the node cache, docs/storage.md) --------------
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir_nofollow(dir_fd: int, parts: list[str] | tuple[str, ...]) -> int:
    """A descriptor of the folder `parts` (path components) under `dir_fd`, every component
    opened without following a symlink: OSError (ELOOP, ENOTDIR, ENOENT) when one is a link,
    not a folder or absent. The caller closes it.

    Args:
        dir_fd: a descriptor of the folder to start from.
        parts: plain path components (no "/", "." or "..": checked by the caller).
    """
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file_nofollow(dir_fd: int, parts: list[str] | tuple[str, ...],
                       flags: int = os.O_RDONLY) -> int:
    """A descriptor of the file `parts` under `dir_fd`, no component a symlink, opened
    non-blocking (a FIFO does not wait for a writer: the caller fstat()s and refuses it)."""
    folder = open_dir_nofollow(dir_fd, parts[:-1])
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK |
                       getattr(os, "O_CLOEXEC", 0), dir_fd=folder)
    finally:
        os.close(folder)


def walk_nofollow(dir_fd: int, prefix: tuple[str, ...] = ()):
    """(components, name, lstat result, folder descriptor) of every entry that is not a
    folder under `dir_fd`, descending only into real folders (never through a symlink); the
    folder descriptor is valid until the next item. Entries that vanish meanwhile are
    skipped."""
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = open_dir_nofollow(dir_fd, (name,))
            except OSError:
                continue
            try:
                yield from walk_nofollow(sub, (*prefix, name))
            finally:
                os.close(sub)
        else:
            yield (*prefix, name), name, st, dir_fd
