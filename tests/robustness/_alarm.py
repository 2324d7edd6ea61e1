"""A time limit for one in-process mutant (SIGALRM): a hang becomes `Hang`, counted as one."""

from __future__ import annotations

import contextlib
import signal


class Hang(Exception):
    """The mutant ran past its limit."""


@contextlib.contextmanager
def alarm(seconds: int):
    """Raise `Hang` in the main thread when the block runs more than `seconds`."""

    def ring(signum, frame):
        raise Hang(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
