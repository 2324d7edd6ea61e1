"""Connecting to Ray: a running cluster (`address="auto"` or `ray://...`), or a local instance
started for this process, quietly (chute prints its own progress)."""

from __future__ import annotations

import logging
import os
from typing import Any

from chute._lazy import require
from chute.errors import ChuteError

__all__ = ["connect", "cluster_cpus", "task_env"]

# what tasks need to reach object storage the way the driver does (docs/storage.md)
_FORWARDED = ("AWS_", "CHUTE_S3_", "CHUTE_DATA_CACHE")


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


def task_env() -> dict[str, Any]:
    """Remote options giving tasks this process's object storage settings (the AWS_ and
    CHUTE_S3_ variables, the node cache folder): a task on a local instance started earlier,
    or on another node, reaches the same endpoint with the same credentials."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED)}
    return {"runtime_env": {"env_vars": env}} if env else {}
