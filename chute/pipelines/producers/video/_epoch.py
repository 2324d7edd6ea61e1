"""The video producer's epoch reader: the clips of the next batch are queued on the decoding
threads before the current batch is waited for, so a thread that finishes its last clip of a
batch starts on the next batch instead of idling until the batch's slowest clip is done
(docs/design.md, "Video clips").

Batches are still delivered strictly in plan order and each one holds exactly the clips of
its request: the reader checks that the request the Pipeline asks for is the one it queued.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from chute.errors import ChuteError
from chute.pipelines.producers._contract import check_in_order

__all__ = ["VideoEpoch"]


class VideoEpoch:
    """Reads `plan`'s batches in order from `first_iteration`, `ahead` batches queued ahead.

    Args:
        producer: the VideoProducer (its `submit(request) -> jobs` queues a batch's clips on
            its threads, `collect(request, jobs, out) -> status` waits for them and writes).
        plan: the epoch's plan (`request(iteration)`, `len`).
        first_iteration: the first batch the Pipeline will ask for.
        ahead: how many batches after the current one are queued.
    """

    def __init__(self, producer, plan, first_iteration: int, ahead: int = 1):
        self.producer = producer
        self.plan = plan
        self.next_iteration = first_iteration
        self.ahead = ahead
        self.pending: deque = deque()  # (iteration, ids, jobs), in iteration order
        self.closed = False

    def _queue_until(self, last: int) -> None:
        queued = self.pending[-1][0] if self.pending else self.next_iteration - 1
        for iteration in range(queued + 1, min(last, len(self.plan) - 1) + 1):
            request = self.plan.request(iteration)
            self.pending.append((iteration, request.ids, self.producer.submit(request)))

    def read(self, request, out: dict) -> np.ndarray:
        check_in_order(self, request)
        self._queue_until(self.next_iteration + self.ahead)
        _, ids, jobs = self.pending.popleft()  # the head is next_iteration (checked above)
        if not np.array_equal(ids, request.ids):
            self._cancel(jobs)
            raise ChuteError(f"producer {self.producer.name!r}: batch {request.iteration} "
                             "differs from the plan's batch it queued (the Pipeline and the "
                             "reader must share one plan)")
        self.next_iteration += 1
        return self.producer.collect(request, jobs, out)

    @staticmethod
    def _cancel(jobs) -> None:
        for job in jobs:
            job.cancel()  # clips not started are dropped; running ones finish unread

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        while self.pending:
            self._cancel(self.pending.popleft()[2])
