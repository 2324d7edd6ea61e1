"""Stage timers: wall and thread-CPU seconds of every stage of a Pipeline's batches
(docs/pipeline.md, "Stage timers").

The Run times what every producer shares: "plan" (the batch request and its shapes), one stage
per field (that producer's `read`), "substitute" (failed samples replaced), "stage" (the copy to
the device) and "wait" (the training loop waiting for a batch). A producer with an attribute
`stages` is given the Pipeline's StageTimes there and records its own parts as "FIELD/PART"
("image/prepare", "image/decode", "image/resample", ...), possibly on its own threads: those
parts overlap each other and their field's stage, so only the top-level stages (no "/") of the
producer thread add up to its busy time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from chute._fork import ProcessLock

__all__ = ["StageTimes"]


class StageTimes:
    """Accumulated (wall seconds, thread-CPU seconds, count) per stage name; thread-safe.

    `counts` holds plain event counters (e.g. which decoder took an image: "image/decoded:gpu").
    """

    def __init__(self) -> None:
        # worker threads take it: a child forked while one held it gets it free
        self._lock = ProcessLock()
        self._times: dict[str, list[float]] = {}
        self._counts: dict[str, int] = {}

    @contextlib.contextmanager
    def measure(self, stage: str) -> Iterator[None]:
        """Time the block as `stage` (wall: perf_counter; CPU: this thread's CPU time)."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - wall, time.thread_time() - cpu)

    def add(self, stage: str, wall: float, cpu: float = 0.0) -> None:
        """Add one occurrence of `stage` that took `wall` seconds and `cpu` CPU seconds."""
        with self._lock:
            entry = self._times.setdefault(stage, [0.0, 0.0, 0])
            entry[0] += wall
            entry[1] += cpu
            entry[2] += 1

    def count(self, name: str, n: int = 1) -> None:
        """Add `n` to the counter `name`."""
        if n:
            with self._lock:
                self._counts[name] = self._counts.get(name, 0) + int(n)

    def as_dict(self) -> dict:
        """{"stages": {name: {"wall_s", "cpu_s", "count"}}, "counts": {name: n}}, JSON-ready."""
        with self._lock:
            stages = {k: {"wall_s": round(v[0], 6), "cpu_s": round(v[1], 6), "count": int(v[2])}
                      for k, v in sorted(self._times.items())}
            return {"stages": stages, "counts": dict(sorted(self._counts.items()))}

    def top_level(self) -> dict[str, float]:
        """Wall seconds of the stages that do not nest in another ("FIELD/PART" do)."""
        with self._lock:
            return {k: v[0] for k, v in self._times.items() if "/" not in k}

    def reset(self) -> None:
        with self._lock:
            self._times.clear()
            self._counts.clear()

    def lines(self) -> list[str]:
        """The table `chute bench` prints: one line per stage, then the counters."""
        table = self.as_dict()
        rows = [f"{'stage':26s} {'wall s':>9s} {'cpu s':>9s} {'count':>7s}"]
        for name, v in table["stages"].items():
            label = f"  {name.partition('/')[2]}" if "/" in name else name
            rows.append(f"{label:26s} {v['wall_s']:9.3f} {v['cpu_s']:9.3f} {v['count']:7d}")
        rows += [f"{name:26s} {n:29d}" for name, n in table["counts"].items()]
        return rows
