"""`backend="auto"` for every producer family: one decision per distributed job.

A family's `auto` hook (e.g. `image/_auto.py`, `video/_auto.py`) measures its candidates with
the autotune library and stores the decision there. This module only makes sure that under DDP
the decision is made once: rank 0 decides (and tunes if it must, while the other ranks do not
compete for the machine) and broadcasts it; the other ranks wait for it. Every rank must build
its Pipeline at the same point, as DDP code does (docs/autotune.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from chute.errors import BackendUnavailableError

__all__ = ["Decision", "AutoHook", "shared_across_ranks"]

log = logging.getLogger("chute")

Decision = tuple[str, dict, str]
"""(backend name, backend options, reason)."""

AutoHook = Callable[..., Decision]
"""A family's decider: called with keyword arguments (dataset, device, batch_size, augment and
what the family measures with) and returns a `Decision`."""


def _process_group():
    """torch.distributed when a job of two or more ranks is initialised, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist


def _decide_on_rank_zero(dist, resolver: AutoHook, request: dict, remedy: str) -> Decision:
    world = dist.get_world_size()
    if dist.get_rank() == 0:
        try:
            name, options, reason = resolver(**request)
        except Exception as exc:
            # the other ranks are waiting in the broadcast: tell them, then fail here too
            dist.broadcast_object_list([("failed", f"{type(exc).__name__}: {exc}")], src=0)
            raise
        decision = (name, dict(options), f"{reason} [decided on rank 0 for all {world} ranks]")
        dist.broadcast_object_list([("ok", decision)], src=0)
        return decision
    box: list = [None]
    dist.broadcast_object_list(box, src=0)
    status, value = box[0]
    if status != "ok":
        raise BackendUnavailableError(
            f"backend='auto': rank 0 could not choose a backend for all {world} ranks ({value}). "
            f"Fix the error rank 0 reports, or {remedy.format_map(request)}."
        )
    return value


def shared_across_ranks(resolver: AutoHook, *, remedy: str) -> AutoHook:
    """`resolver`, run once per distributed job: under an initialised torch.distributed job of
    two or more ranks, rank 0 resolves and broadcasts its decision; the other ranks wait for
    it. Outside such a job `resolver` runs as is.

    Args:
        resolver: the family's decider (see `AutoHook`).
        remedy: what the other ranks' error tells the user to do instead of "auto", formatted
            with the request's keyword arguments.
    """

    @functools.wraps(resolver)
    def resolve(**request) -> Decision:
        dist = _process_group()
        if dist is None:
            return resolver(**request)
        return _decide_on_rank_zero(dist, resolver, request, remedy)

    return resolve
