"""Several batches in flight: K decode workers, each with its own state (decoder, CUDA stream,
reused buffers), fed in plan order, their results taken in order (docs/pipeline.md, "Batches
in flight").

A producer that splits its fill in two uses them:

    decoded = producer.decode_batch(state, request)   # on worker k: prepare + decode
    status = producer.complete(decoded, request, out) # on the reader's thread: kernel/resample
    producer.discard(decoded)                         # a decoded batch nobody will complete

`InFlightEpoch` is the epoch reader: it keeps the next `depth` batches of the plan submitted
(batch j to worker j mod K, so a worker's buffers are reused every K batches, only after the
batch that used them was completed or discarded), and `read` waits for its batch's decode only.
The workers live as long as the producer: a new pass or epoch starts no thread.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from chute.errors import ChuteError
from chute.pipelines.producers._contract import check_in_order

__all__ = ["DecodeWorkers", "InFlightEpoch", "Ticket", "free_event"]

_JOIN_TIMEOUT_S = 60.0


def free_event() -> threading.Event:
    """A worker state's "buffers free" event, set: its first batch need not wait."""
    event = threading.Event()
    event.set()
    return event


class Ticket:
    """The result of one submitted job: `result()` waits for it (re-raising its exception)."""

    def __init__(self, worker: int):
        self.worker = worker
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()


class DecodeWorkers:
    """K threads; worker k calls `work(states[k], job)` for the jobs given to it, in order.

    Args:
        count: K, the number of workers.
        make_state: makes one worker's state (what it owns: a decoder, a stream, buffers);
            called K times, and K times again in a forked child, which has none of the
            parent's threads and may hold a state the parent was using when it forked.
        work: what a worker does with a job; its exception goes to the job's Ticket.
        name: thread name prefix.
    """

    def __init__(self, count: int, make_state: Callable[[], Any],
                 work: Callable[[Any, Any], Any], name: str):
        if count < 1:
            raise ValueError("DecodeWorkers needs at least one worker")
        self._count = count
        self._make_state = make_state
        self._work = work
        self._name = name
        self._next = 0
        self._closed = False
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self.states = [self._make_state() for _ in range(self._count)]
        self._queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in self.states]
        self.threads = [threading.Thread(target=self._loop, args=(k,), name=f"{self._name}-{k}",
                                         daemon=True) for k in range(len(self.states))]
        for thread in self.threads:
            thread.start()

    def __len__(self) -> int:
        return len(self.states)

    def submit(self, job: Any) -> Ticket:
        """Give `job` to the next worker in turn."""
        if self._closed:
            raise ChuteError("decode workers used after close()")
        if self._pid != os.getpid():  # a forked child has none of the parent's threads
            self._start()
        k = self._next % len(self.states)
        self._next += 1
        ticket = Ticket(k)
        self._queues[k].put((job, ticket))
        return ticket

    def _loop(self, k: int) -> None:
        while True:
            item = self._queues[k].get()
            if item is None:
                return
            job, ticket = item
            try:
                ticket._finish(self._work(self.states[k], job))
            except BaseException as exc:  # noqa: BLE001 - delivered with the job's batch
                ticket._finish(error=exc)

    def close(self) -> None:
        """Stop every worker after the jobs it holds and join it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for q in self._queues:
            q.put(None)
        for thread in self.threads:
            if thread is threading.current_thread():
                continue
            thread.join(_JOIN_TIMEOUT_S)
            if thread.is_alive():
                warnings.warn(f"chute: decode worker {thread.name} did not stop within "
                              f"{_JOIN_TIMEOUT_S:.0f} s (a decode call is stuck?)",
                              RuntimeWarning, stacklevel=2)


class InFlightEpoch:
    """Epoch reader of a producer with `decode_batch` / `complete` / `discard`, keeping `depth`
    batches of `plan` decoding ahead on `workers`.

    Args:
        producer: the producer (its `name` names it in errors).
        plan: the pass's plan (`request(i)`, `len`).
        first_iteration: the first iteration `read` is asked for.
        workers: the producer's DecodeWorkers.
        depth: batches submitted ahead of the one being read (at most len(workers), so that a
            worker's buffers are free when its next batch starts).
    """

    def __init__(self, producer: Any, plan: Any, first_iteration: int, workers: DecodeWorkers,
                 depth: int):
        self.producer = producer
        self.plan = plan
        self.workers = workers
        self.depth = max(1, min(int(depth), len(workers)))
        self.next_iteration = first_iteration
        self.closed = False
        self._pid = os.getpid()
        self._submitted = first_iteration
        self._pending: collections.deque = collections.deque()
        self._top_up()

    def _top_up(self) -> None:
        end = min(len(self.plan), self.next_iteration + self.depth)
        while self._submitted < end:
            request = self.plan.request(self._submitted)
            self._pending.append((request, self.workers.submit(request)))
            self._submitted += 1

    def read(self, request: Any, out: dict[str, Any]) -> np.ndarray:
        check_in_order(self, request)
        if not self._pending:  # planning ahead failed at the previous batch: plan this one
            self._top_up()
        planned, ticket = self._pending.popleft()
        self.next_iteration += 1
        try:
            decoded = ticket.result()
        except BaseException:
            self._top_up()
            raise
        try:
            if not np.array_equal(np.asarray(planned.ids), np.asarray(request.ids)):
                raise ChuteError(
                    f"producer {self.producer.name!r}: batch {request.iteration} decoded ahead "
                    "holds other samples than the batch asked for (the plan is not a pure "
                    "function of its iteration); report this")
            status = self.producer.complete(decoded, request, out)
        except BaseException:
            self.producer.discard(decoded)
            raise
        self._top_up()
        return status

    def close(self) -> None:
        """Wait for the batches still decoding and release them (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self._pid != os.getpid():
            # a forked child closing its parent's pass (its generator's `finally`): the workers
            # decoding these batches are not in this process, and make fresh states here
            self._pending.clear()
            return
        while self._pending:
            _, ticket = self._pending.popleft()
            try:
                decoded = ticket.result()
            except BaseException:  # noqa: BLE001, S112 - nobody reads this batch any more
                continue
            self.producer.discard(decoded)
