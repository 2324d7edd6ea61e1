"""Load generators: a Poisson client (open loop: requests arrive at exponential intervals and are
dropped when the first queue is full) and a bulk client (closed loop: as fast as the pipeline
takes them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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
        gave_up: True if the client stopped offering early (its `give_up` said so); the
            inputs it did not offer are not counted in `offered`.
    """

    requests: list[InferRequest]
    offered: int
    dropped: int
    start: float
    end: float
    rate: float | None
    complete: bool = True
    gave_up: bool = False

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
                timeout: float | None = None, progress=None,
                give_up: Callable[[list[InferRequest], int], bool] | None = None) -> RunResult:
    """Offer `inputs` at exponentially distributed intervals (a Poisson process of `rate`).

    Args:
        server: a running InferServer.
        inputs: one first-stage input per request (e.g. sample ids).
        rate: mean requests per second.
        seed: seed of the inter-arrival times (the same seed gives the same arrivals).
        timeout: seconds to wait for results after the last arrival (None: no limit).
        progress: optional tqdm-like bar with total=len(inputs).
        give_up: optional `give_up(accepted, dropped)`, asked between arrivals; when it says
            True the client offers nothing more (e.g. the run can no longer meet an SLO) and
            waits for the requests it offered.

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
    dropped = offered = 0
    gave_up = False
    start = time.monotonic()
    for when, item in zip(arrivals.tolist(), inputs, strict=True):
        while not gave_up and (left := start + when - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
            bar.tick(dropped)
            gave_up = give_up is not None and give_up(accepted, dropped)
        if gave_up:
            break
        offered += 1
        request = server.submit(item)
        if request is None:
            dropped += 1
        else:
            accepted.append(request)
    result = _finish(server, accepted, offered, dropped, start, rate, timeout, bar)
    result.gave_up = gave_up
    return result


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
