"""Connecting to Ray: a running cluster (`address="auto"` or `ray://...`), or a local instance
started for this process, quietly (chute prints its own progress)."""

from __future__ import annotations

import logging
from typing import Any

from chute._lazy import require
from chute.errors import ChuteError

__all__ = ["connect", "cluster_cpus"]


def connect(address: str | None = None) -> Any:
    """The `ray` module, initialised: joined to the cluster at `address`, or a local instance
    started on this machine (None), unless this process is connected already.

    Args:
        address: "auto" (the cluster `ray start` runs on this node), "ray://HOST:PORT" or
            "HOST:PORT"; None starts a local instance with this machine's CPUs.
    """
    ray = require("ray", "ray")
    require("ray.data", "ray")
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
        except ConnectionError as exc:
            raise ChuteError(f"--ray-address {address}: no Ray cluster answers there ({exc}); "
                             "start one with `ray start --head`, or leave the address out to "
                             "run on a local Ray instance") from None
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # chute shows one bar of its own
    context.print_on_execution_start = False
    context.enable_operator_progress_bars = False
    # per-operator status lines and a note that Ray's own bars are off
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return ray


def cluster_cpus(ray: Any) -> int:
    """The CPUs of the connected cluster (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
