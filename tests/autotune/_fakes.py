"""Fake candidates for the autotuner tests: batch sources that advance a fake clock instead of
doing work, so measured rates are exact and the tests take no time."""

from __future__ import annotations

from chute.autotune import BatchSource, Candidate


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def cand(name: str, cost: int, *, backend: str = "cpu", available: bool = True,
         reason: str = "", priority: int = 0) -> Candidate:
    return Candidate(name=name, backend=backend, params={"n": cost}, available=available,
                     reason=reason, cost=(cost,), priority=priority)


class FakeRunner:
    """Runner whose candidate `name` produces batches of `batch` images at `rates[name]` img/s
    (after a first batch taking `first_batch_s`: the "JIT"); names in `fail` raise."""

    def __init__(self, clock: FakeClock, rates: dict[str, float], *, batch: int = 10,
                 first_batch_s: float = 0.0, fail: dict[str, Exception] | None = None):
        self.clock, self.rates, self.batch = clock, rates, batch
        self.first_batch_s = first_batch_s
        self.fail = fail or {}
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.syncs = 0

    def __call__(self, candidate: Candidate) -> BatchSource:
        name = candidate.name
        self.opened.append(name)
        calls = {"n": 0}

        def next_batch() -> int:
            if name in self.fail:
                raise self.fail[name]
            calls["n"] += 1
            extra = self.first_batch_s if calls["n"] == 1 else 0.0
            self.clock.t += extra + self.batch / self.rates[name]
            return self.batch

        def sync() -> None:
            self.syncs += 1

        return BatchSource(next_batch, sync, lambda: self.closed.append(name))
