"""What the autotuner compares: candidates, as the caller declares them.

The library does not know which backends exist. A caller passes any objects with the attributes
of `CandidateLike` (a backend's own candidate type works as is); `Candidate` is a ready-made one.
Unavailable candidates are kept (with the reason) so the table shows what this machine cannot
run and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["Candidate", "CandidateLike"]

# The plain CandidateLike lives in the bottom layer so that backends can make them without
# importing the autotuner (docs/design.md, "Autotune").
from chute._candidate import Candidate  # noqa: E402


@runtime_checkable
class CandidateLike(Protocol):
    """One backend with one set of options, as the autotuner reads it.

    Attributes:
        name: display name, unique among the candidates of one tune.
        backend: the backend name a decision hands back (e.g. for ImageOptions(backend=...)).
        params: the backend options a decision hands back (JSON-serialisable values).
        available: False when this machine cannot run it; it is then listed, never measured.
        reason: why it is unavailable ("" when available).
        cost: orders candidates from cheapest to dearest; ties in speed go to the cheaper one.
        priority: measurement order (lower first), so a short budget measures the likeliest
            winner of each backend first.
    """

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def params(self) -> Mapping: ...
    @property
    def available(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def cost(self) -> tuple: ...
    @property
    def priority(self) -> int: ...
