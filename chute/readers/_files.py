"""Durable file writes (temp name, fsync, rename) and the checksum used in manifests."""

from __future__ import annotations

import os
from pathlib import Path

import xxhash

__all__ = ["CHECKSUM", "HashingWriter", "atomic_write_bytes", "file_checksum", "fsync_dir"]

# Name of the checksum algorithm, stored in the manifest next to every file's digest.
CHECKSUM = "xxh3_64"
_CHUNK = 8 << 20


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
        if not self._file.closed:
            self._file.close()
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
