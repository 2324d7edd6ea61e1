"""Choosing replicas and batch sizes from measurement: for one stage at a time (in order), try
each (replicas, max_batch[, max_wait_ms]) of a small grid with the other stages at their best so
far; score a
configuration by the highest Poisson rate it sustains with p95 latency under the SLO, nothing
dropped and nothing failed (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from chute.infer._clients import run_bulk, run_poisson
from chute.infer._config import InferConfig, max_replicas
from chute.infer._report import summarize
from chute.infer._server import InferServer

__all__ = ["Trial", "SearchResult", "search", "sustained_rate", "format_trials"]

_T = TypeVar("_T")

# Poisson probes, as fractions of the capacity a bulk run measured, highest first.
PROBES = (0.9, 0.75, 0.6, 0.45)


@dataclass
class Trial:
    """One measured configuration.

    Attributes:
        stages: stage name -> (replicas, max_batch) of this configuration.
        waits: stage name -> max_wait_ms of this configuration.
        varied: the stage whose setting this trial varied.
        capacity: requests/s of a bulk (closed-loop) run.
        probes: (offered rate, p95 ms or None, dropped, failed) per Poisson probe; p95 is inf
            when the probe stopped early because it could no longer meet the SLO.
        sustained: the highest probed rate meeting the SLO (0.0 when none did).
        skipped: why it was not measured ("budget", "cannot beat the best"), or None.
        final: (rate, p95 ms or None, dropped, failed) of the final round, when it was in it.
    """

    stages: dict[str, tuple[int, int]]
    varied: str
    capacity: float = 0.0
    probes: list[tuple[float, float | None, int, int]] = field(default_factory=list)
    sustained: float = 0.0
    skipped: str | None = None
    final: tuple[float, float | None, int, int] | None = None
    waits: dict[str, float] = field(default_factory=dict)


@dataclass
class SearchResult:
    """The configuration with the highest sustained rate, and every trial measured."""

    best: InferConfig
    best_rate: float
    trials: list[Trial]
    seconds: float


def _meets(report: dict, slo_ms: float) -> bool:
    p95 = report["latency_ms"]["p95"]
    return (p95 is not None and p95 <= slo_ms and report["dropped"] == 0
            and report["failed"] == 0 and report["unfinished"] == 0)


def hopeless(slo_ms: float, n: int):
    """A `give_up` for run_poisson: True once a probe of `n` requests can no longer meet the
    SLO (a request dropped or failed, or so many over `slo_ms`, finished or still in flight,
    that the p95 is over it), so failing probes stop early and the search measures more."""
    # numpy's p95 of n values lies at or after sorted index floor(0.95 (n - 1))
    late_limit = n - int(0.95 * (n - 1))

    def give_up(accepted: list, dropped: int) -> bool:
        if dropped:
            return True
        now = time.monotonic()
        late = failed = 0
        for r in accepted:
            failed += r.error is not None
            late += ((r.done if r.finished else now) - r.submitted) * 1000 > slo_ms
        return failed > 0 or late >= late_limit

    return give_up


def sustained_rate(server, inputs: Sequence, *, slo_ms: float, capacity: float,
                   fractions: Sequence[float] = PROBES, floor: float = 0.0,
                   seed: int = 0, stop: Callable[[], bool] | None = None
                   ) -> tuple[float, list]:
    """The highest of `fractions` x `capacity` that `server` sustains under the SLO.

    Args:
        server: a running InferServer.
        inputs: the requests of each probe.
        slo_ms: the p95 latency bound.
        capacity: the bulk throughput that the fractions scale.
        fractions: probe rates as fractions of capacity, highest first.
        floor: probes at or below this rate are not run (they cannot beat it).
        seed: seed of the arrivals.
        stop: optional `stop()`; when it says True the probe running ends (it is not
            counted) and no more are run.

    Returns:
        (rate, probes): the rate (0.0 when no probe met the SLO) and (rate, p95, dropped,
        failed) per probe run.
    """
    probes = []
    for fraction in fractions:
        rate = fraction * capacity
        if rate <= floor or rate <= 0:
            break
        timeout = max(30.0, 10 * slo_ms / 1000)
        run = run_poisson(server, inputs, rate, seed=seed, timeout=timeout,
                          give_up=hopeless(slo_ms, len(inputs)), stop=stop)
        if run.stopped:
            break
        report = summarize(run, server)
        probes.append((rate, math.inf if run.gave_up else report["latency_ms"]["p95"],
                       report["dropped"], report["failed"]))
        if not run.gave_up and _meets(report, slo_ms):
            return rate, probes
    return 0.0, probes


def _first(value: _T, values: Sequence[_T]) -> list[_T]:
    """`values` with `value` (the current setting) first."""
    return [value, *[v for v in values if v != value]]


def _trial(config: InferConfig, varied: str) -> Trial:
    return Trial({s.name: (s.replicas, s.max_batch) for s in config.stages}, varied,
                 waits={s.name: s.max_wait_ms for s in config.stages})


def _key(trial: Trial) -> tuple:
    return tuple(sorted((n, r, b, trial.waits.get(n)) for n, (r, b) in trial.stages.items()))


def _probe(config: InferConfig, inputs: Sequence, rate: float, seed: int, stop):
    """(rate, p95, dropped, failed) of one Poisson run on a fresh server, None if stopped."""
    with InferServer(config) as server:
        run_bulk(server, list(inputs[:_warm(config)]), timeout=120, stop=stop)
        run = run_poisson(server, inputs, rate, seed=seed, timeout=120, stop=stop)
        report = summarize(run, server)
    if run.stopped:
        return None
    return rate, report["latency_ms"]["p95"], report["dropped"], report["failed"]


def _warm(config: InferConfig) -> int:
    return max(8, sum(s.replicas * s.max_batch for s in config.stages))


def _final_round(leaders: list[tuple[Trial, InferConfig]], inputs: Sequence, slo_ms: float,
                 seed: int, say, stop) -> tuple[Trial, InferConfig] | None:
    """Re-measure the leading configurations back to back at the best rate any of them
    sustained (single measurements on a shared machine are noisy); the winner meets the SLO
    there with the lowest p95, or, when none does, has the lowest p95. None when `stop` cut
    the round short (its measurements are then not comparable)."""
    rate = max(t.sustained for t, _ in leaders)
    for trial, config in leaders:
        trial.final = _probe(config, inputs, rate, seed + 1, stop)
        if trial.final is None:
            trial.skipped = "budget (final round cut short)"
            return None
        say(format_trials([trial], header=False))

    def key(item):
        _, p95, dropped, failed = item[0].final
        met = p95 is not None and p95 <= slo_ms and not dropped and not failed
        return (not met, float("inf") if p95 is None else p95)

    return min(leaders, key=key)


class _Clock:
    """The search's time budget: what a server start and stop and a trial have cost so far,
    so that work which cannot finish in the time left is not started, and a deadline that
    ends the runs under way early enough to close their servers within the budget."""

    def __init__(self, budget_s: float, stop: Callable[[], bool] | None):
        self.started = time.monotonic()
        self.end = self.started + budget_s
        self.interrupt = stop
        self.server_s = 0.0  # the longest start + warm-up + close of a server
        self.close_s = 0.0  # the longest close of a server
        self.trial_s = 0.0  # the longest trial on a running server

    def left(self) -> float:
        return self.end - time.monotonic()

    def interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt()

    def stop(self) -> bool:
        """True once the runs must end (interrupted, or the budget left only closes)."""
        return self.interrupted() or self.left() <= self.close_s + 0.5

    def fits(self, seconds: float) -> bool:
        return not self.interrupted() and self.left() > seconds + self.close_s + 0.5


def search(config: InferConfig, inputs: Sequence, *, slo_ms: float, budget_s: float,
           replicas: Sequence[int] | None = None, batches: Sequence[int] = (1, 2, 4),
           waits: Sequence[float] | None = None, finalists: int = 3, seed: int = 0,
           log=None, stop: Callable[[], bool] | None = None) -> SearchResult:
    """Measure a small grid of (replicas, max_batch) per stage; keep the best sustained rate.

    Args:
        config: the starting configuration (its settings are tried first).
        inputs: the requests of every measurement (e.g. a few dozen sample ids).
        slo_ms: p95 latency bound in milliseconds.
        budget_s: seconds the search may take. The starting configuration is always
            measured; after it, a server or a trial is started only when what such work has
            cost so far still fits in the time left, and runs under way end early enough to
            close their server in time (a trial cut short says so and does not count).
        replicas: replica counts to try (default 1 and 2, up to the CPU count).
        batches: max_batch values to try.
        waits: max_wait_ms values to try with each max_batch above 1 (None: only the
            stage's own; each value adds a trial per batch size, so it costs budget).
        finalists: how many of the best configurations a final round measures again, back
            to back, at the best sustained rate (when the time left allows it).
        seed: seed of the Poisson arrivals.
        log: optional callable taking one line of progress text.
        stop: optional `stop()` (e.g. Ctrl-C): when it says True the search ends at once
            and returns what it has measured.

    Returns:
        A SearchResult; `best` is `config` itself if nothing beat it.
    """
    clock = _Clock(budget_s, stop)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    replicas = tuple(replicas or [r for r in (1, 2) if r <= max(cores or 1, 1)])
    best, best_rate = config, -1.0
    trials: list[Trial] = []
    measured: dict[tuple, Trial] = {}
    configs: dict[tuple, InferConfig] = {}
    say = log or (lambda line: None)
    for stage in config.stages:
        base = best
        current = base.stage(stage.name)
        others = sum(s.replicas for s in base.stages if s.name != stage.name)
        for r in _first(current.replicas, replicas):
            if others + r > max_replicas():
                continue  # over the machine's cap (docs/inference.md, "A config is code")
            candidates = [base.replace(stage.name, replicas=r, max_batch=b, max_wait_ms=w)
                          for b in _first(current.max_batch, batches)
                          for w in (_first(current.max_wait_ms, waits) if waits and b > 1
                                    else [current.max_wait_ms])]
            todo = [c for c in candidates if _key(_trial(c, stage.name)) not in measured]
            if not todo:
                continue
            if measured and not clock.fits(clock.server_s + clock.trial_s):
                for c in todo:
                    trials.append(dataclasses.replace(
                        _trial(c, stage.name),
                        skipped="interrupted" if clock.interrupted() else "budget"))
                continue
            first_trial = not measured
            # one server per replica count: the batch size changes while it runs
            opened = time.monotonic()
            with InferServer(todo[0]) as server:
                run_bulk(server, list(inputs[:_warm(todo[0])]), timeout=120,
                         stop=None if first_trial else clock.stop)
                clock.server_s = max(clock.server_s, time.monotonic() - opened)
                for c in todo:
                    trial = _trial(c, stage.name)
                    key = _key(trial)
                    measured[key], configs[key] = trial, c
                    trials.append(trial)
                    if len(measured) > 1 and not clock.fits(clock.trial_s):
                        trial.skipped = "interrupted" if clock.interrupted() else "budget"
                        continue
                    began = time.monotonic()
                    # the starting configuration is measured whatever the budget
                    until = None if len(measured) == 1 else clock.stop
                    target = c.stage(stage.name)
                    server.set_batching(stage.name, target.max_batch, target.max_wait_ms)
                    run = run_bulk(server, inputs, timeout=120, stop=until)
                    bulk = summarize(run, server)
                    trial.capacity = bulk["throughput"] if bulk["failed"] == 0 else 0.0
                    if run.stopped:
                        trial.skipped = "budget (cut short)"
                        trial.capacity = 0.0
                    elif max(PROBES) * trial.capacity <= best_rate:
                        trial.skipped = "cannot beat the best"
                    else:
                        trial.sustained, trial.probes = sustained_rate(
                            server, inputs, slo_ms=slo_ms, capacity=trial.capacity,
                            floor=best_rate, seed=seed, stop=until)
                        if until is not None and until() and not trial.sustained:
                            trial.skipped = "budget (cut short)"
                        if trial.sustained > best_rate:
                            best, best_rate = c, trial.sustained
                    clock.trial_s = max(clock.trial_s, time.monotonic() - began)
                    say(format_trials([trial], header=False))
                closing = time.monotonic()
            clock.close_s = max(clock.close_s, time.monotonic() - closing)
            clock.server_s = max(clock.server_s, clock.close_s)
    ranked = sorted((t for t in trials if t.sustained > 0), key=lambda t: -t.sustained)
    leaders = [(t, configs[_key(t)]) for t in ranked[:finalists]]
    # each finalist: a fresh server, its warm-up, and one probe at the best rate
    rate = max((t.sustained for t, _ in leaders), default=0.0)
    per_final = clock.server_s + (len(inputs) / rate if rate else 0.0) + 1.0
    while len(leaders) > 1 and not clock.fits(len(leaders) * per_final):
        leaders.pop()
    if len(leaders) > 1:
        picked = _final_round(leaders, inputs, slo_ms, seed, say, clock.stop)
        if picked is not None:
            winner, best = picked
            assert winner.final is not None  # the final round measured every leader
            rate, p95, dropped, failed = winner.final
            met = p95 is not None and p95 <= slo_ms and not dropped and not failed
            best_rate = rate if met else winner.sustained
    return SearchResult(best, max(best_rate, 0.0), trials, time.monotonic() - clock.started)


def _p95(p95: float | None) -> str:
    if p95 is None:
        return "-"
    return "over SLO, stopped" if math.isinf(p95) else f"{p95:.0f}"


def format_trials(trials: list[Trial], header: bool = True) -> str:
    """Trials as a Markdown table."""
    lines = ["| varied | setting (replicas x batch, wait, per stage) | capacity req/s | probes "
             "(rate req/s: p95 ms) | sustained req/s |",
             "|---|---|---|---|---|"] if header else []
    for t in trials:
        setting = ", ".join(f"{n} {r}x{b}" + (f" w{t.waits[n]:g}ms" if b > 1 and n in t.waits
                                              else "")
                            for n, (r, b) in t.stages.items())
        probes = "; ".join(f"{rate:.2f}: {_p95(p95)}"
                           + (f" ({dropped} dropped)" if dropped else "")
                           + (f" ({failed} failed)" if failed else "")
                           for rate, p95, dropped, failed in t.probes)
        if t.skipped:
            probes = (probes + "; " if probes else "") + f"skipped: {t.skipped}"
        if t.final:
            rate, p95, dropped, failed = t.final
            probes += (f"; final round {rate:.2f}: {_p95(p95)}"
                       + (f" ({dropped} dropped)" if dropped else "")
                       + (f" ({failed} failed)" if failed else ""))
        capacity = f"{t.capacity:.2f}" if t.capacity else "-"
        lines.append(f"| {t.varied} | {setting} | {capacity} | {probes} | {t.sustained:.2f} |")
    return "\n".join(lines)
