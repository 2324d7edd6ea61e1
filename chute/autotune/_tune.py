"""The tuning loop: measure available candidates one after another within a total budget.

Measurement order is by each candidate's `priority` (the likeliest winner of each backend
first), so a short budget still compares the backends; the remaining grid follows while budget
is left. Each candidate gets a window of at most `window` seconds and at least `min_window`;
when less than that is left, the rest are listed as not measured and the decision is made among
those measured.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable

from chute.autotune._candidate import CandidateLike
from chute.autotune._measure import BatchSourceLike, BudgetExhausted, measure
from chute.autotune._select import TIE_TOLERANCE, Decision, Trial, select

__all__ = ["tune", "Runner"]

Runner = Callable[[CandidateLike], BatchSourceLike]
"""Opens a batch source running a candidate (e.g. a Pipeline with its backend and options)."""


def _window_for(remaining: float, left: int, window: float, min_window: float) -> float:
    # Half of a fair share of what is left: the other half pays for start-up and warm-up.
    return max(min_window, min(window, 0.5 * remaining / left))


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="autotune", unit="candidate", file=sys.stderr,
                disable=not enabled, leave=False)


def _run_one(candidate: CandidateLike, runner: Runner, *, device: str, window: float,
             deadline: float, clock, **measure_kw) -> Trial:
    source = runner(candidate)
    try:
        m = measure(source, window=window, deadline=deadline, device=device, clock=clock,
                    **measure_kw)
    finally:
        source.close()
    if m.over_budget:
        note = f"over budget: warm-up took {m.warmup_seconds:.1f}s (JIT compile, first touch)"
    else:
        note = "window cut short by the budget" if m.cut_short else ""
    return Trial(candidate, m, note)


def tune(
    candidates: Iterable[CandidateLike],
    runner: Runner,
    *,
    budget: float,
    device: str = "cpu",
    window: float = 2.0,
    min_window: float = 0.1,
    warmup_batches: int = 2,
    min_batches: int = 3,
    tie_tolerance: float = TIE_TOLERANCE,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    unit: str = "img",
) -> Decision:
    """Measure the available `candidates` with `runner` within `budget` seconds and decide.

    Failures (any exception while opening or running a candidate) are recorded as that
    candidate's note and excluded.

    Args:
        candidates: what to compare (see `CandidateLike`); unavailable ones are listed only.
        runner: opens a batch source (see `BatchSourceLike`) running one candidate; it is
            closed after that candidate's window.
        budget: total seconds for all measurements.
        device: where batches are delivered ("cuda:N" samples the GPU utilisation).
        window: longest steady-state window per candidate, in seconds.
        min_window: shortest window; with less budget left the rest are not measured.
        warmup_batches: batches run before the window (JIT compile, first touch).
        min_batches: fewest batches a window counts.
        tie_tolerance: rates within this fraction of the fastest count as a tie.
        progress: show a progress bar on stderr.
        clock: the time source (tests pass a fake one).
        unit: what a batch source's count is ("img", "clip", ...), for the reason.

    Raises:
        ChuteError: nothing could be measured (the message lists why, per candidate).
    """
    candidates = list(candidates)
    deadline = clock() + budget
    todo = sorted((c for c in candidates if c.available),
                  key=lambda c: (c.priority, c.cost, c.name))
    done: dict[str, Trial] = {}
    with _progress_bar(len(todo), progress) as bar:
        for i, candidate in enumerate(todo):
            remaining = deadline - clock()
            if remaining < min_window:
                break
            bar.set_postfix_str(candidate.name)
            try:
                trial = _run_one(
                    candidate, runner, device=device, clock=clock, deadline=deadline,
                    window=_window_for(remaining, len(todo) - i, window, min_window),
                    warmup_batches=warmup_batches, min_batches=min_batches,
                    # the first measurement completes whatever the budget: a decision needs one
                    finish_past_deadline=not any(t.measurement for t in done.values()),
                )
            except BudgetExhausted as exc:
                done[candidate.name] = Trial(candidate, None, f"not measured: {exc}")
                break
            except Exception as exc:  # recorded and excluded, never hidden
                trial = Trial(candidate, None, f"failed: {type(exc).__name__}: {exc}")
            done[candidate.name] = trial
            bar.update(1)
    skipped = f"not measured: the budget of {budget:g}s was used up"
    trials = [
        done.get(c.name) or Trial(c, None, "" if not c.available else skipped)
        for c in candidates
    ]
    return select(trials, tie_tolerance=tie_tolerance, unit=unit)
