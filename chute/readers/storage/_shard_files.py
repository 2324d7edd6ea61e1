"""The payload files of a remote dataset in one process (docs/storage.md): fetched into the
node cache on first use, memory-mapped, and pinned while mapped; at most `keep` stay mapped
(least recently used are let go: views already handed out stay valid), so a cache smaller
than the dataset is enough. `ReadAhead` fetches the files an epoch will need next, in the
order it needs them, on background threads."""

from __future__ import annotations

import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from chute.errors import ChuteError
from chute.readers.storage._files import map_fd
from chute.readers.storage._node_cache import NodeCache
from chute.readers.storage._object_store import Remote
from chute.readers.storage._rewritten import download_listed

__all__ = ["RemoteFile", "ShardFiles", "LazyBins", "ReadAhead"]


@dataclass(frozen=True)
class RemoteFile:
    """A payload file of the dataset: its object name and the manifest's size and checksum."""

    name: str
    size: int
    checksum: str | None


class ShardFiles:
    """Lazily fetched payload files, by local path.

    Args:
        remote: the dataset's folder in object storage.
        cache: the node cache.
        files: local path (inside the cache's version folder) -> RemoteFile.
        keep: files kept mapped (and pinned) at once; None: all.
        map_file: kept for callers that pass it; cached files are mapped by `map` itself
            (no symlink followed, checked before use).
    """

    def __init__(self, remote: Remote, cache: NodeCache, files: dict[Path, RemoteFile],
                 keep: int | None, map_file: Callable[[Path], np.ndarray]):
        self.remote = remote
        self.cache = cache
        self.files = files
        self.keep = keep
        self._map_file = map_file
        self._lock = threading.Lock()
        self._open: OrderedDict[Path, tuple[np.ndarray, int]] = OrderedDict()
        self._used: Callable[[Path], None] | None = None  # told of each mapped file (ReadAhead)
        # (device, inode, mtime) of each file whose checksum this process checked
        self._checked: dict[Path, tuple[int, int, int]] = {}

    def lazy(self, path: Path) -> bool:
        return path in self.files

    def size(self, path: Path) -> int:
        return self.files[path].size

    def fetch(self, path: Path, *, wait: bool = True) -> bool:
        """Download `path` into the cache unless it is there; False when `wait` is False and
        the cache has no room now."""
        entry = self.files[path]

        def download(temp: Path) -> None:
            download_listed(self.remote, entry.name, path, entry.size, entry.checksum,
                            temp=temp)

        return self.cache.fetch(download, path, entry.size, wait=wait)

    def map(self, path: Path) -> np.ndarray:
        """The whole file `path`, fetched when needed, mapped and pinned."""
        with self._lock:
            hit = self._open.get(path)
            if hit is not None:
                self._open.move_to_end(path)
                return hit[0]
        # let go of the least recently used first: the file it needs room for may be this one
        # (views of a file let go stay valid: the mapping holds it)
        with self._lock:
            while self.keep is not None and len(self._open) >= self.keep:
                _, (_, old_pin) = self._open.popitem(last=False)
                self.cache.unpin(old_pin)
        pin = self.cache.pin(path)
        try:
            array = self._fetch_and_map(path)
        except BaseException:
            self.cache.unpin(pin)
            raise
        with self._lock:
            if path in self._open:  # another thread mapped it meanwhile
                self.cache.unpin(pin)
                array = self._open[path][0]
            else:
                self._open[path] = (array, pin)
                while self.keep is not None and len(self._open) > self.keep:
                    _, (_, old_pin) = self._open.popitem(last=False)
                    self.cache.unpin(old_pin)
        used = self._used
        if used is not None:
            used(path)
        return array

    def _fetch_and_map(self, path: Path) -> np.ndarray:
        """`path` fetched and mapped, call with its pin held. The cached file is opened
        through no symlink and without blocking, and mapped only when it is a regular file
        of the manifest's size that only its owner can write (`NodeCache.trusted`), with the
        manifest's checksum the first time this process maps it; anything else is deleted
        and downloaded again (docs/storage.md, "The node cache")."""
        entry = self.files[path]
        problem = ""
        for _ in range(3):
            self.fetch(path)
            try:
                fd = self.cache.open_mapped(path)
            except OSError as exc:
                problem = exc.strerror or str(exc)  # a symlink, a folder, gone meanwhile
                self.cache.discard(path)
                continue
            try:
                st = os.fstat(fd)
                if not self.cache.trusted(st, entry.size):
                    problem = "not a read-only regular file of the manifest's size"
                    self.cache.discard(path)
                    continue
                array = map_fd(fd, entry.size)
            finally:
                os.close(fd)  # the mapping holds no descriptor
            stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
            if entry.checksum is None or self._checked.get(path) == stamp:
                return array
            if xxhash.xxh3_64_hexdigest(array.data) == entry.checksum:
                self._checked[path] = stamp
                return array
            problem = "its checksum differs from the manifest's"
            del array
            self.cache.discard(path)
        raise ChuteError(f"{path}: the cached copy of {self.remote.where(entry.name)} was "
                         f"damaged 3 times ({problem}); check what else writes the cache folder "
                         f"{self.cache.root}")

    def release(self) -> None:
        """Let go of every mapped file (views handed out stay valid)."""
        with self._lock:
            for _, pin in self._open.values():
                self.cache.unpin(pin)
            self._open.clear()


class LazyBins(Sequence):
    """One field's payload file of every shard, mapped when first indexed."""

    def __init__(self, files: ShardFiles, paths: list[Path]):
        self._files = files
        self._paths = paths

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, k):
        return self._files.map(self._paths[k])


class ReadAhead:
    """Fetches the payload files of `batches` (sample ids, in the order they will be read)
    ahead of the reader, at most `ahead` files past the last one it mapped, `workers` at
    a time, on daemon threads. `close()` stops it without waiting for a download in flight;
    a failed prefetch is left for the reader to meet (and report) itself.

    Args:
        files: the dataset's ShardFiles.
        paths_of: sample ids -> the payload paths they need, in order.
        batches: the epoch's batches of sample ids.
        ahead: files fetched past the reader's position.
        workers: downloads in flight.
    """

    def __init__(self, files: ShardFiles, paths_of: Callable[[np.ndarray], list[Path]],
                 batches: Iterable[np.ndarray], ahead: int, workers: int):
        self.files = files
        self.ahead = max(ahead, 1)
        self._paths_of = paths_of
        self._batches = iter(batches)
        self._order: list[Path] = []
        self._position: dict[Path, int] = {}
        self._read = -1  # the furthest position of the order the reader has mapped
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._queue: queue.Queue[Path] = queue.Queue()
        self.fetched = 0
        files._used = self._on_used
        self._threads = [threading.Thread(target=self._plan, name="chute-readahead",
                                          daemon=True)]
        self._threads += [threading.Thread(target=self._work, name="chute-readahead-fetch",
                                           daemon=True) for _ in range(max(workers, 1))]
        for thread in self._threads:
            thread.start()

    def _on_used(self, path: Path) -> None:
        where = self._position.get(path)
        if where is not None and where > self._read:
            with self._cond:
                self._read = where
                self._cond.notify_all()

    def _extend(self, upto: int) -> bool:
        """Grow the order to hold position `upto`; False at the end of the epoch."""
        while len(self._order) <= upto:
            batch = next(self._batches, None)
            if batch is None:
                return False
            for path in self._paths_of(np.asarray(batch, np.int64)):
                if path not in self._position:
                    self._position[path] = len(self._order)
                    self._order.append(path)
        return True

    def _plan(self) -> None:
        try:
            nxt = 0
            while not self._stop.is_set():
                with self._cond:
                    while nxt > self._read + self.ahead and not self._stop.is_set():
                        self._cond.wait(0.5)
                if self._stop.is_set() or not self._extend(nxt):
                    return
                self._queue.put(self._order[nxt])
                nxt += 1
        except Exception:  # noqa: BLE001 - the reader meets (and reports) any real failure
            return

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                path = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            while not self._stop.is_set():
                try:
                    if self.files.fetch(path, wait=False):
                        self.fetched += 1
                        break
                except Exception:  # noqa: BLE001 - the reader fetches it again and reports
                    break
                self._stop.wait(0.2)  # no room yet: the reader frees some as it moves on

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self.files._used == self._on_used:
            self.files._used = None
