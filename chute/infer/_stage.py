"""One stage in the parent process: its bounded input queue, its replicas and the record of the
batches they ran (for busy fractions)."""

from __future__ import annotations

import queue
import threading
from typing import NamedTuple

from chute.infer._config import StageConfig
from chute.infer._replica_handle import ReplicaHandle

__all__ = ["Stage", "BatchRecord"]


class BatchRecord(NamedTuple):
    """One call of a stage: which replica, when it started and finished, how many requests."""

    replica: int
    started: float
    finished: float
    size: int


class Stage:
    """Stage `position` of `server` (an InferServer), built from `config`."""

    def __init__(self, config: StageConfig, position: int, server):
        self.config = config
        self.name = config.name
        self.position = position
        self.server = server
        self.base = server.config.base
        self.dataset = server.config.dataset
        self.queue: queue.Queue = queue.Queue(config.queue_size)
        self.replicas = [ReplicaHandle(self, k) for k in range(config.replicas)]
        self.batches: list[BatchRecord] = []
        self.restarts = 0
        self._lock = threading.Lock()

    def record_batch(self, replica: int, started: float, finished: float, size: int) -> None:
        with self._lock:
            self.batches.append(BatchRecord(replica, started, finished, size))

    def busy_seconds(self, start: float, end: float) -> float:
        """Replica-seconds spent in calls within [start, end]."""
        with self._lock:
            batches = list(self.batches)
        return sum(max(0.0, min(b.finished, end) - max(b.started, start)) for b in batches)

    def service_seconds(self, start: float, end: float) -> list[float]:
        """Durations of the calls that started within [start, end]."""
        with self._lock:
            return [b.finished - b.started for b in self.batches if start <= b.started <= end]

    @property
    def pids(self) -> list[int]:
        """Every process id this stage's replicas have had (restarts included)."""
        return [pid for r in self.replicas for pid in r.pids]
