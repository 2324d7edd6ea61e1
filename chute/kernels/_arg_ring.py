"""A ring of page-locked host buffers for the kernel's per-launch arguments.

A copy from pageable host memory to the device may block the calling thread until the copy is
done (the driver stages it through its own pinned buffer), which would stall the producer
thread once per batch. From pinned memory the copy is asynchronous; a slot is rewritten only
after the event recorded behind its last copy has completed. Allocator and event are injected
(CuPy's in `chute/kernels/_launch.py`), so this module needs no CUDA library.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = ["ArgRing"]


class _Event(Protocol):
    """What the ring needs of an event (e.g. cupy.cuda.Event)."""

    def record(self, stream: Any) -> Any: ...

    def synchronize(self) -> Any: ...


class ArgRing:
    """`slots` pinned buffers used round-robin, each guarded by the event of its last copy.

    Args:
        slots: buffers in the ring (>= 1); more slots let more launches be in flight.
        alloc: nbytes -> 1-D uint8 NumPy array in pinned memory (e.g. cupyx.empty_pinned).
        make_event: () -> an event with record(stream) and synchronize() (e.g. cupy.cuda.Event).
    """

    def __init__(self, slots: int, alloc: Callable[[int], np.ndarray],
                 make_event: Callable[[], _Event]):
        if slots < 1:
            raise ValueError(f"an argument ring needs at least 1 slot, got {slots}")
        self._alloc = alloc
        self._make_event = make_event
        self._buffers: list[np.ndarray | None] = [None] * slots
        self._events: list[_Event | None] = [None] * slots
        self._next = 0
        self._lock = threading.Lock()

    def copy_to_device(self, host: np.ndarray, device, stream) -> None:
        """Enqueue host -> device on `stream` through the next pinned slot.

        Args:
            host: the packed arguments (1-D uint8).
            device: a CuPy uint8 array of the same size; anything with set(array, stream=).
            stream: the stream the copy (and then the kernel) is ordered on.
        """
        with self._lock:
            slot = self._next
            self._next = (slot + 1) % len(self._buffers)
            event = self._events[slot]
            if event is not None:  # the slot's previous copy must have read it
                event.synchronize()
            buffer = self._buffers[slot]
            if buffer is None or buffer.size < host.size:
                # Grow by doubling so the steady state never allocates page-locked memory.
                size = max(host.size, 0 if buffer is None else 2 * buffer.size)
                self._buffers[slot] = buffer = self._alloc(size)
            staged = buffer[: host.size]
            staged[...] = host
            device.set(staged, stream=stream)
            if event is None:
                self._events[slot] = event = self._make_event()
            event.record(stream)
