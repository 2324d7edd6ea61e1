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
        stopped: True if its `stop` said so (e.g. Ctrl-C, or a time budget): it offered no
            more and did not wait for the requests in flight (they count as unfinished).
    """

    requests: list[InferRequest]
    offered: int
    dropped: int
    start: float
    end: float
    rate: float | None
    complete: bool = True
    gave_up: bool = False
    stopped: bool = False

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


Stop = Callable[[], bool]


def _finish(server, accepted: list, offered: int, dropped: int, start: float, rate,
            timeout, progress: _Progress, stop: Stop | None) -> RunResult:
    deadline = None if timeout is None else time.monotonic() + timeout
    complete = stopped = True
    if stop is None or not stop():
        stopped = False
        while not server.wait(accepted, 0.2):
            progress.tick(dropped)
            stopped = stop is not None and stop()
            if stopped or (deadline is not None and time.monotonic() > deadline):
                complete = False
                break
    else:
        complete = server.wait(accepted, 0)
    progress.tick(dropped)
    done = [r.done for r in accepted if r.finished]
    end = time.monotonic() if stopped or not done else max(done)
    return RunResult(accepted, offered, dropped, start, end, rate, complete, stopped=stopped)


def run_poisson(server, inputs: Sequence[Any], rate: float, *, seed: int = 0,
                timeout: float | None = None, progress=None,
                give_up: Callable[[list[InferRequest], int], bool] | None = None,
                stop: Stop | None = None) -> RunResult:
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
        stop: optional `stop()`, asked at least every 0.1 s; when it says True the client
            returns at once with what has finished (`RunResult.stopped`; e.g. Ctrl-C or a
            time budget).

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
            if stop is not None and stop():
                break
            time.sleep(min(left, 0.1))
            bar.tick(dropped)
            gave_up = give_up is not None and give_up(accepted, dropped)
        if gave_up or (stop is not None and stop()):
            break
        offered += 1
        request = server.submit(item)
        if request is None:
            dropped += 1
        else:
            accepted.append(request)
    result = _finish(server, accepted, offered, dropped, start, rate, timeout, bar, stop)
    result.gave_up = gave_up
    return result


def run_bulk(server, inputs: Sequence[Any], *, timeout: float | None = None,
             progress=None, stop: Stop | None = None) -> RunResult:
    """Offer every input as soon as the first queue has room (measures capacity).

    Args:
        server: a running InferServer.
        inputs: one first-stage input per request.
        timeout: seconds to wait for results after the last submission (None: no limit).
        progress: optional tqdm-like bar with total=len(inputs).
        stop: as in `run_poisson`.
    """
    bar = _Progress(progress, server)
    accepted: list[InferRequest] = []
    offered = 0
    start = time.monotonic()
    for item in inputs:
        request = None
        while request is None and not (stop is not None and stop()):
            # a bounded wait for room, so that `stop` is heard while the queue is full
            request = server.submit(item, block=True, timeout=None if stop is None else 0.1)
        if request is None:
            break
        offered += 1
        accepted.append(request)
        bar.tick(0)
    return _finish(server, accepted, offered, 0, start, None, timeout, bar, stop)
