"""Locks, thread pools and per-process state that a forked child starts afresh.

A child forked while another thread of the parent holds a lock inherits it held, and no thread
of the child will ever release it; a thread pool's workers do not exist in the child. So every
module-level lock and pool of the decode path is one of these, renewed in the child right after
the fork (`os.register_at_fork`), and module state that belongs to the parent process is reset
through `on_fork_in_child` (docs/design.md, "Processes and threads"). torch's intra-op pool is
one of them too: a forked child runs on one intra-op thread, as torch's DataLoader workers do.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

__all__ = ["ProcessLock", "ProcessPool", "ReusePool", "on_fork_in_child"]

_LOCKS: weakref.WeakSet = weakref.WeakSet()
_POOLS: weakref.WeakSet = weakref.WeakSet()
_FORK_WAITS: list[weakref.ref] = []  # locks a fork waits for, in creation order
_held_for_fork: dict[int, list[ProcessLock]] = {}  # by forking thread: what it took


def on_fork_in_child(reset: Callable[[], None]) -> Callable[[], None]:
    """Run `reset()` in every child right after a fork (a no-op where fork does not exist).

    Args:
        reset: puts this process's module state back to its import-time value.
    """
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reset)
    return reset


class ProcessLock:
    """A `threading.Lock` that is free in a forked child whatever the parent held.

    Args:
        fork_waits: a fork waits until no other thread holds this lock, and nothing takes it
            until the fork is done. For a lock around Numba's parallel kernels: a child forked
            while another thread ran a TBB parallel region crashed in its own first one
            (docs/design.md, "Processes and threads"). A fork takes such locks in the order
            they were made, so code holding two must take them in that order too.
    """

    def __init__(self, *, fork_waits: bool = False) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        _LOCKS.add(self)
        if fork_waits:
            _FORK_WAITS.append(weakref.ref(self))

    def __enter__(self) -> ProcessLock:
        self._lock.acquire()
        self._owner = threading.get_ident()
        return self

    def __exit__(self, *exc) -> None:
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


class ProcessPool:
    """A `ThreadPoolExecutor` made on first use in each process (its workers are threads,
    which a forked child does not have).

    Args:
        workers: threads of the pool.
        name: thread name prefix.
    """

    def __init__(self, workers: int, name: str = "chute") -> None:
        self.workers = max(1, int(workers))
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        _POOLS.add(self)

    def _current(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._pool

    def map(self, fn, *iterables):
        return self._current().map(fn, *iterables)

    def submit(self, fn, *args) -> Future:
        """`fn(*args)` on the pool; its Future."""
        return self._current().submit(fn, *args)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class ReusePool:
    """Objects that one thread uses at a time (decompression contexts), lent to whichever
    thread asks and taken back after: as many exist as threads used them at once, not one per
    thread that ever read (a new thread per epoch or per Pipeline would keep adding some).

    Args:
        make: a new object.
        free: releases one the pool does not keep (None: left to the garbage collector).
        keep: idle objects kept for reuse; more are freed.
    """

    def __init__(self, make: Callable[[], object], free: Callable[[object], object] | None = None,
                 keep: int = 16) -> None:
        self._make = make
        self._free = free
        self.keep = keep
        self._idle: list = []
        self._lock = ProcessLock()

    @contextmanager
    def lease(self) -> Iterator:
        """One object for the `with` block's time."""
        with self._lock:
            item = self._idle.pop() if self._idle else None
        if item is None:
            item = self._make()
        try:
            yield item
        finally:
            with self._lock:
                kept = len(self._idle) < self.keep
                if kept:
                    self._idle.append(item)
            if not kept and self._free is not None:
                self._free(item)


def fork_waits_for() -> list[ProcessLock]:
    """The live `ProcessLock(fork_waits=True)` locks, in the order they were made."""
    _FORK_WAITS[:] = [r for r in _FORK_WAITS if r() is not None]
    return [lock for r in _FORK_WAITS if (lock := r()) is not None]


def _wait_before_fork() -> None:
    me = threading.get_ident()
    taken = []
    for lock in fork_waits_for():
        # the forking thread's own lock: waiting for it would wait for ever
        if lock._owner != me:
            lock._lock.acquire()
            taken.append(lock)
    # per thread: two threads forking at once each release only what they took
    _held_for_fork[me] = taken


def _release_after_fork() -> None:
    for lock in reversed(_held_for_fork.pop(threading.get_ident(), [])):
        lock._lock.release()


def _renew() -> None:
    _held_for_fork.clear()
    for lock in list(_LOCKS):
        lock._lock = threading.Lock()
        lock._owner = None
    for pool in list(_POOLS):
        # the parent's workers are gone here: forget that pool without joining it
        pool._lock = threading.Lock()
        pool._pool = None


def _one_torch_thread() -> None:
    # torch's OpenMP pool (GNU libgomp in the Linux wheels) has no workers in a forked child,
    # and the child's first parallel region (a large bfloat16 cast, a matmul) waits for them
    # for ever once the parent has used the pool. One intra-op thread runs no parallel region.
    # torch is only looked up: a child of a process that never imported it imports nothing.
    torch = sys.modules.get("torch")
    set_threads = getattr(torch, "set_num_threads", None)
    if set_threads is None:
        return
    try:
        if torch.get_num_threads() > 1:  # type: ignore[union-attr]
            set_threads(1)
    except (AttributeError, RuntimeError):  # a torch half-imported when the fork happened
        pass


on_fork_in_child(_renew)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_wait_before_fork, after_in_parent=_release_after_fork)
on_fork_in_child(_one_torch_thread)

