"""SIGINT and SIGTERM held while the driver of a Ray convert talks to Ray: a KeyboardInterrupt
raised inside a Ray call (`ray.init`, `ray.wait`) crashed the driver in Ray's C++ core and
left Ray processes behind. The driver looks at `received` between calls instead, then cancels,
waits, shuts Ray down and raises KeyboardInterrupt itself (docs/ray.md, "Failures")."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["HeldSignals"]

_HELD = (signal.SIGINT, signal.SIGTERM)


class HeldSignals:
    """A context: SIGINT and SIGTERM are recorded in `received`, not raised. Outside the main
    thread (where Python delivers no signal) and for a signal the process ignores, nothing
    changes. On exit each handler is put back unless someone replaced it meanwhile (ray.init
    sets its own SIGTERM handler, which then stays)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def __enter__(self) -> HeldSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in _HELD:
                previous = signal.getsignal(sig)
                if previous is not signal.SIG_IGN:  # e.g. SIGINT of a background job
                    self._previous[sig] = previous
                    signal.signal(sig, self._hold)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            current = signal.getsignal(sig)
            if current != self._hold:
                # ray.init's Python handler stays, and is installed again: Ray's C++ core put
                # its own crash handler under it, which turns a SIGTERM into a stack dump
                previous = current
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def check(self) -> None:
        """KeyboardInterrupt when a signal was received."""
        if self.received is not None:
            raise KeyboardInterrupt(signal.Signals(self.received).name)
