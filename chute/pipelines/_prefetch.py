"""A background thread that fills a ring of preallocated slots ahead of the consumer.

The producer thread takes a free slot, calls `fill(slot, iteration)` for the next iteration and
queues (slot, payload); the consumer gets them in iteration order and gives slots back with
`release`. With `count` slots, the producer runs at most `count - held` batches ahead, where
`held` is how many the consumer still holds. Exceptions raised by `fill` are re-raised in the
consumer when it reaches that batch (batches before it are delivered normally).

Shutdown: `close()` stops the producer after its current `fill` and joins the thread. The
Pipeline calls it from its generator's `finally`, which runs when a loop ends, breaks, or the
abandoned generator is garbage collected. (`fill` is usually a bound method of the owner, so the
running thread keeps the Prefetcher alive: `__del__` is only a last resort.)
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Prefetcher"]

_END = object()
_JOIN_TIMEOUT_S = 60.0


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetcher:
    def __init__(
        self,
        slots: list,
        fill: Callable[[Any, int], Any],
        iterations: Iterable[int],
        name: str = "chute-prefetch",
    ):
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        for slot in slots:
            self._free.put(slot)
        self._done = False
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=_produce,
            args=(self._free, self._ready, self._stop, fill, iter(iterations)),
            name=name,
            daemon=True,
        )
        self._thread.start()

    def get(self) -> tuple[Any, Any]:
        """Next (slot, payload) in iteration order; StopIteration at the end."""
        if self._done:
            raise StopIteration
        if self._pid != os.getpid():
            raise RuntimeError(
                "this pass of the Pipeline was started before the process forked, and its "
                "prefetch thread stayed in the parent; start a new pass here (iter(pipe))")
        item = self._ready.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            self.close()
            raise item.exc
        return item

    def release(self, slot) -> None:
        self._free.put(slot)

    def close(self) -> None:
        self._done = True
        self._stop.set()
        self._free.put(None)  # wakes a producer waiting for a free slot
        self._ready.put(_END)  # wakes a consumer waiting in another thread (it then stops)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                warnings.warn(
                    f"chute: prefetch thread {self._thread.name} did not stop within "
                    f"{_JOIN_TIMEOUT_S:.0f} s (a decode call is stuck?)",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def __del__(self):
        if not self._stop.is_set():
            self.close()


def _produce(free, ready, stop, fill, iterations) -> None:
    try:
        for iteration in iterations:
            slot = free.get()
            if slot is None or stop.is_set():
                return
            ready.put((slot, fill(slot, iteration)))
            if stop.is_set():
                return
        ready.put(_END)
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the consumer
        ready.put(_Failure(exc))
