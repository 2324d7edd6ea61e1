"""Candidate: one backend with one set of options, as the autotuner compares them. A bottom-layer
value type, so producers declare candidates and the autotuner reads them without either
importing the other (docs/design.md, "Autotune")."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Candidate"]


@dataclass(frozen=True)
class Candidate:
    """One backend with one set of options.

    Attributes:
        name: display name, unique among the candidates of one tune.
        backend: the backend name a decision hands back (ImageOptions(backend=...)).
        params: the backend options a decision hands back (JSON-serialisable values).
        available: False when this machine cannot run it; it is then listed, never measured.
        reason: why it is unavailable ("" when available).
        cost: orders candidates from cheapest to dearest; ties in speed go to the cheaper one.
        priority: measurement order (lower first), so a short budget measures the likeliest
            winner of each backend first.
        fidelity: how exactly its pixels follow the shared resize definition ("exact", or
            what differs), shown next to its speed (benchmarks/bench_fidelity.py measures it).
    """

    name: str
    backend: str
    params: dict = field(default_factory=dict, hash=False, compare=False)
    available: bool = True
    reason: str = ""
    cost: tuple = ()
    priority: int = 0
    fidelity: str = ""
