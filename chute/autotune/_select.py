"""Choosing a winner from trials: plain functions over what was measured.

Rules: only measured candidates compete (unavailable, failed and not-measured ones are listed
with their reason); throughputs within `tie_tolerance` of the fastest count as a tie and the
cheapest tied candidate wins (its `cost`, then name: deterministic); nothing measured is an
error that says why each candidate dropped out.
"""

from __future__ import annotations

from dataclasses import dataclass

from chute.autotune._candidate import CandidateLike
from chute.autotune._measure import Measurement
from chute.errors import ChuteError

__all__ = ["Trial", "Decision", "select", "TIE_TOLERANCE"]

TIE_TOLERANCE = 0.05


@dataclass(frozen=True)
class Trial:
    """A candidate and what happened to it: a measurement, or a note saying why there is none."""

    candidate: CandidateLike
    measurement: Measurement | None = None
    note: str = ""

    @property
    def status(self) -> str:
        if not self.candidate.available:
            return "unavailable"
        if self.measurement is not None:
            return "measured"
        return "failed" if self.note.startswith("failed") else "not measured"


@dataclass(frozen=True)
class Decision:
    choice: CandidateLike
    reason: str
    trials: tuple[Trial, ...]
    margin: float | None  # winner rate over the best other measured candidate's
    runner_up: CandidateLike | None
    unit: str = "img"  # what the rates count


def _rate(trial: Trial) -> float:
    assert trial.measurement is not None  # only measured trials are rated
    return trial.measurement.img_per_s


def _order(trial: Trial) -> tuple:
    return (trial.candidate.cost, trial.candidate.name)


def _why_none(trials: list[Trial]) -> str:
    lines = []
    for t in trials:
        why = t.candidate.reason if t.status == "unavailable" else (t.note or t.status)
        lines.append(f"  {t.candidate.name}: {why}")
    return "\n".join(lines)


def _dropouts(trials: list[Trial]) -> str:
    counts: dict[str, int] = {}
    for t in trials:
        if t.status != "measured":
            counts[t.status] = counts.get(t.status, 0) + 1
    failed = next((t for t in trials if t.status == "failed"), None)

    def said(status: str, n: int) -> str:
        if status == "failed" and failed is not None:  # the first failure says why
            return f"{n} failed, e.g. {failed.candidate.name}: {failed.note[:300]}"
        return f"{n} {status}"

    return ", ".join(said(status, n) for status, n in sorted(counts.items()))


def select(trials, *, tie_tolerance: float = TIE_TOLERANCE, unit: str = "img") -> Decision:
    """The winner among the measured trials, with a sentence saying why it won.

    Args:
        trials: every candidate with its measurement or the note saying why there is none.
        tie_tolerance: rates within this fraction of the fastest count as a tie, which the
            cheapest tied candidate wins.
        unit: what the rates count, as the reason names it ("img", "clip", ...).

    Raises:
        ChuteError: no trial was measured.
    """
    trials = list(trials)
    measured = [t for t in trials if t.measurement is not None and _rate(t) > 0]
    if not measured:
        raise ChuteError(
            "autotune could not measure any candidate, so there is nothing to choose from:\n"
            f"{_why_none(trials)}\n"
            "Fix the failure shown above, or give a larger --budget, or pick a backend explicitly."
        )
    best = max(_rate(t) for t in measured)
    tied = [t for t in measured if _rate(t) >= best * (1.0 - tie_tolerance)]
    winner = min(tied, key=_order)
    others = sorted((t for t in measured if t is not winner), key=lambda t: (-_rate(t), _order(t)))
    runner_up = others[0] if others else None

    name, rate = winner.candidate.name, _rate(winner)
    if runner_up is None:
        reason = f"{name} was the only candidate measured ({rate:.0f} {unit}/s)"
        margin = None
    else:
        margin = rate / _rate(runner_up)
        other = f"{runner_up.candidate.name} ({_rate(runner_up):.0f} {unit}/s)"
        if margin >= 1.0 + tie_tolerance:
            reason = f"{name} ({rate:.0f} {unit}/s) won by {margin:.2f}x over {other}"
        else:
            reason = (
                f"{name} ({rate:.0f} {unit}/s) tied with {other} within {tie_tolerance:.0%}; "
                "the cheaper candidate is preferred"
            )
    dropped = _dropouts(trials)
    if dropped:
        reason += f" [{dropped}]"
    return Decision(
        choice=winner.candidate,
        reason=reason,
        trials=tuple(trials),
        margin=margin,
        runner_up=runner_up.candidate if runner_up else None,
        unit=unit,
    )
