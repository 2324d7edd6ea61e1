"""Durable file writes (temp name, fsync, rename) and the checksum used in manifests."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import weakref
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from chute.errors import DiskFullError

__all__ = ["CHECKSUM", "HashingWriter", "atomic_write_bytes", "file_checksum", "fsync_dir",
           "is_disk_full", "no_space", "read_regular_file", "write_skipped", "map_fd",
           "map_path", "map_npy", "TOO_MANY_FILES"]

# Name of the checksum algorithm, stored in the manifest next to every file's digest.
CHECKSUM = "xxh3_64"
_CHUNK = 8 << 20


_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    """True for the OSError of a full disk (or an exhausted quota)."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def no_space(where: object, what: str) -> DiskFullError:
    """The one-line error of a write of `what` into `where` that found the disk full."""
    error = DiskFullError(f"{where}: no space left on device while writing {what}; free space "
                          "or write elsewhere")
    error.errno = errno.ENOSPC
    return error


def _new_hasher():
    return xxhash.xxh3_64()


def file_checksum(path: Path) -> str:
    """Hex digest of a whole file, read in chunks."""
    hasher = _new_hasher()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


class HashingWriter:
    """Writes a file under a temporary name, hashing and counting the bytes as they go;
    `commit()` fsyncs and renames it into place, `abort()` removes it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._temp = _temp_name(self.path)
        self._file = open(self._temp, "wb")  # noqa: SIM115 - closed in commit/abort
        self._hasher = _new_hasher()
        self.size = 0

    def write(self, data) -> None:
        self._file.write(data)
        self._hasher.update(data)
        self.size += len(memoryview(data).cast("B"))

    def commit(self) -> dict:
        """Finish the file; returns its manifest entry {"size", CHECKSUM}."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._temp, self.path)
        return {"size": self.size, CHECKSUM: self._hasher.hexdigest()}

    def abort(self) -> None:
        """Remove the temporary file; never raises for the file itself (on a full disk,
        closing flushes the buffered tail and fails again, and the file must still go)."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        self._temp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> dict:
    """Write `data` to `path` atomically; returns its manifest entry."""
    writer = HashingWriter(path)
    try:
        writer.write(data)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file (symlinks followed). Anything else (a FIFO, a folder named
    like an image, a device) is an OSError saying what it is, found without reading it: reading
    a FIFO would block forever. A path no file can have (a NUL byte in a listed name) is an
    OSError too, so that every caller's `except OSError` names it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except ValueError as exc:  # os.open's "embedded null byte"
        raise OSError(errno.EINVAL, str(exc), str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{_kind_of(mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def write_skipped(path: Path | str, rows: list[tuple[str, str]]) -> None:
    """The skipped-files report: a header, then `path<TAB>reason` per row. File names that are
    not UTF-8 are written back as their original bytes (surrogateescape). `path` may be an
    `s3://` URL (the report of a dataset written there)."""
    lines = ["path\treason"] + [f"{where}\t{why}" for where, why in rows]
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    from chute.readers.storage._object_store import Remote, is_remote

    if is_remote(path):
        folder, name = str(path).rsplit("/", 1)
        Remote(folder).put_bytes(name, data)
        return
    Path(path).write_bytes(data)


# -- mappings that hold no descriptor (docs/storage.md, "The node cache") --------------------
# Python's mmap keeps a duplicate of the file's descriptor for the mapping's life (until 3.13's
# trackfd=False): one descriptor per mapped shard, and a dataset of 1,000 shards fails under
# `ulimit -n 1024`. A mapping needs no descriptor, so the libc call is made directly.
_EMPTY = np.zeros(0, np.uint8)
_EMPTY.flags.writeable = False


@cache
def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_ = libc.mmap
        munmap = libc.munmap
    except (OSError, AttributeError):
        return None
    mmap_.restype = ctypes.c_void_p
    mmap_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int64]
    munmap.restype = ctypes.c_int
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mmap_, munmap


_MAP_FAILED = ctypes.c_void_p(-1).value


def map_fd(fd: int, size: int) -> np.ndarray:
    """A read-only uint8 array of the first `size` bytes of the file open as `fd`, mapped
    shared; the mapping holds no descriptor (the caller may close `fd` at once) and is
    unmapped when the array and every view of it are gone. OSError as mmap(2) raises it."""
    if size == 0:
        return _EMPTY
    calls = _libc()
    if calls is None:  # no libc to call: Python's mmap (which keeps a descriptor)
        return np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ), np.uint8)
    mmap_, munmap = calls
    address = mmap_(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))

    base: Any = ctypes.c_ubyte * size

    class Mapped(base):  # a class of its own: ctypes arrays take no weakref
        pass

    buffer = Mapped.from_address(address)
    weakref.finalize(buffer, munmap, address, size)
    array = np.frombuffer(buffer, np.uint8)
    array.flags.writeable = False
    return array


def map_path(path: Path) -> np.ndarray:
    """The whole file `path`, mapped read-only (`map_fd`), its descriptor closed at once."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return map_fd(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


TOO_MANY_FILES = (errno.EMFILE, errno.ENFILE)


def map_npy(path: Path) -> np.ndarray:
    """A read-only memory-mapped `.npy` array (what `np.load(mmap_mode="r")` gives) that holds
    no descriptor (`map_fd`). OSError as opening the file raises it; ValueError (and what
    NumPy's header parser raises) for a file that is not a plain `.npy` array."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        with open(fd, "rb", closefd=False) as f:
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
        if dtype.hasobject:
            raise ValueError("an array of Python objects")
        count = int(np.prod(shape, dtype=np.int64))
        size = os.fstat(fd).st_size
        if offset + count * dtype.itemsize > size:
            raise ValueError(f"the header says {shape} {dtype}, the file is {size} bytes")
        whole = map_fd(fd, size)
    finally:
        os.close(fd)
    flat = whole[offset:offset + count * dtype.itemsize].view(dtype)
    return flat.reshape(shape, order="F" if fortran else "C")
