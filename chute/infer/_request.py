"""A request's record: its input, result and per-stage timestamps (time.monotonic seconds,
one clock for every process of the machine)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StageTimes", "InferRequest"]

NAN = float("nan")


@dataclass
class StageTimes:
    """When one request went through one stage.

    Attributes:
        enqueued: offered to the stage's input queue (it may wait there for room).
        batched: taken from the queue into a batch by a replica.
        started: the replica began the batch's call.
        finished: the call returned.
        batch_size: requests in that call.
        replica: which replica ran it.
    """

    enqueued: float = NAN
    batched: float = NAN
    started: float = NAN
    finished: float = NAN
    batch_size: int = 0
    replica: int = -1

    @property
    def queue_wait(self) -> float:
        """Seconds from enqueued to batched."""
        return self.batched - self.enqueued


@dataclass
class InferRequest:
    """One request through the pipeline.

    Attributes:
        id: its position in submission order (0, 1, ...).
        input: what was submitted (for a video loader, a sample id, a file path or
            {"video": ..., "clips": N}).
        submitted: when the client submitted it.
        stages: stage name -> StageTimes, for the stages it reached.
        done: when it finished (succeeded or failed), NaN while in flight.
        output: the last stage's output for it (None when it failed).
        error: why it failed ("stage NAME: ..."), None when it succeeded.
    """

    id: int
    input: Any
    submitted: float
    stages: dict[str, StageTimes] = field(default_factory=dict)
    done: float = NAN
    output: Any = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return not math.isnan(self.done)

    @property
    def ok(self) -> bool:
        return self.finished and self.error is None

    @property
    def latency(self) -> float:
        """Seconds from submitted to done."""
        return self.done - self.submitted
