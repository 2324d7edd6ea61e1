"""Load generators: a Poisson client (open loop: requests arrive at exponential intervals and are
dropped when the first queue is full) and a bulk client (closed loop: as fast as the pipeline
takes them)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.infer._request import InferRequest

__all__ = ["RunResult", "run_poisson", "run_bulk"]


@dataclass
class RunResult:
    """What one client run did.

    Attributes:
        requests: the accepted requests' records, in submission order.
        offered: requests the client tried to submit.
        dropped: requests refused because the first queue was full.
        start: when the first request was offered (time.monotonic).
        end: when the last accepted request finished.
        rate: the Poisson rate offered (requests/s), None for bulk.
        complete: False if the wait for results timed out.
    """

    requests: list[InferRequest]
    offered: int
    dropped: int
    start: float
    end: float
    rate: float | None
    complete: bool = True

    @property
    def failed(self) -> int:
        return sum(r.error is not None for r in self.requests if r.finished)


class _Progress:
    """Moves a tqdm-like bar to the number of offered requests that are settled."""

    def __init__(self, bar, server):
        self.bar, self.server, self.base = bar, server, len(server.completed)

    def tick(self, dropped: int) -> None:
        if self.bar is not None:
            settled = len(self.server.completed) - self.base + dropped
            if settled > self.bar.n:
                self.bar.update(settled - self.bar.n)


def _finish(server, accepted: list, offered: int, dropped: int, start: float, rate,
            timeout, progress: _Progress) -> RunResult:
    deadline = None if timeout is None else time.monotonic() + timeout
    complete = True
    while not server.wait(accepted, 0.2):
        progress.tick(dropped)
        if deadline is not None and time.monotonic() > deadline:
            complete = False
            break
    progress.tick(dropped)
    done = [r.done for r in accepted if r.finished]
    end = max(done) if done else time.monotonic()
    return RunResult(accepted, offered, dropped, start, end, rate, complete)


def run_poisson(server, inputs: Sequence[Any], rate: float, *, seed: int = 0,
                timeout: float | None = None, progress=None) -> RunResult:
    """Offer `inputs` at exponentially distributed intervals (a Poisson process of `rate`).

    Args:
        server: a running InferServer.
        inputs: one first-stage input per request (e.g. sample ids).
        rate: mean requests per second.
        seed: seed of the inter-arrival times (the same seed gives the same arrivals).
        timeout: seconds to wait for results after the last arrival (None: no limit).
        progress: optional tqdm-like bar with total=len(inputs).

    Returns:
        The run's RunResult; a request that finds the first queue full is dropped, not retried.
    """
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(inputs))
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    bar = _Progress(progress, server)
    accepted: list[InferRequest] = []
    dropped = 0
    start = time.monotonic()
    for when, item in zip(arrivals.tolist(), inputs, strict=True):
        while (left := start + when - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
            bar.tick(dropped)
        request = server.submit(item)
        if request is None:
            dropped += 1
        else:
            accepted.append(request)
    return _finish(server, accepted, len(inputs), dropped, start, rate, timeout, bar)


def run_bulk(server, inputs: Sequence[Any], *, timeout: float | None = None,
             progress=None) -> RunResult:
    """Offer every input as soon as the first queue has room (measures capacity).

    Args:
        server: a running InferServer.
        inputs: one first-stage input per request.
        timeout: seconds to wait for results after the last submission (None: no limit).
        progress: optional tqdm-like bar with total=len(inputs).
    """
    bar = _Progress(progress, server)
    accepted = []
    start = time.monotonic()
    for item in inputs:
        accepted.append(server.submit(item, block=True))
        bar.tick(0)
    return _finish(server, accepted, len(inputs), 0, start, None, timeout, bar)
