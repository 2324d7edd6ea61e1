"""Connecting to Ray: a running cluster (`address="auto"` or `ray://...`), or a local instance
started for this process, quietly (chute prints its own progress)."""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from typing import Any

from chute._lazy import require
from chute.errors import ChuteError
from chute.ray._signals import HeldSignals

__all__ = ["connect", "cluster_cpus", "task_env", "shutdown"]

# what tasks need to reach object storage the way the driver does (docs/storage.md)
_FORWARDED = ("AWS_", "CHUTE_S3_", "CHUTE_DATA_CACHE")
_CONNECT_TIMEOUT_S = 10  # to reach a cluster's address before ray.init is asked to
_NO_CRASH_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"
_initialised: list[bool] = []  # [True] once connect() called ray.init in this process


def connect(address: str | None = None) -> Any:
    """The `ray` module, initialised: joined to the cluster at `address`, or a local instance
    started on this machine (None), unless this process is connected already.

    Args:
        address: "auto" (the cluster `ray start` runs on this node), "ray://HOST:PORT" or
            "HOST:PORT"; None starts a local instance with this machine's CPUs.
    """
    ray = _import_ray()
    require("ray.data", "ray")
    if not ray.is_initialized():
        if address is not None:
            _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
            _initialised[:] = [True]
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


def _import_ray() -> Any:
    """The `ray` module, imported (on first use) without Ray's C++ crash handler in this
    process: it took SIGTERM too, turning it into a stack dump and an abort that left Ray's
    processes running, where chute stops the convert and Ray (docs/ray.md, "Failures"). Ray
    reads the variable when it is imported; Ray's own processes, started later, keep it."""
    added = "ray" not in sys.modules and _NO_CRASH_HANDLER not in os.environ
    if added:
        os.environ[_NO_CRASH_HANDLER] = "1"
    try:
        return require("ray", "ray")
    finally:
        if added:
            os.environ.pop(_NO_CRASH_HANDLER, None)


def _check_reachable(address: str) -> None:
    """ChuteError unless something listens at the cluster's address: ray.init retries an
    address where nothing runs for minutes without end."""
    given = address
    if address == "auto":  # as Ray resolves it: RAY_ADDRESS, else this node's latest cluster
        address = os.environ.get("RAY_ADDRESS") or _current_cluster() or ""
        if not address:
            raise ChuteError("--ray-address auto: no Ray cluster runs on this node (no "
                             "RAY_ADDRESS, nothing started by `ray start`); start one with "
                             "`ray start --head`, or leave the address out to run on a local "
                             "Ray instance")
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        raise ChuteError(f"--ray-address {given}: not an address of a Ray cluster; give auto, "
                         "HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)),
                                 timeout=_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ChuteError(f"--ray-address {given}: no Ray cluster answers at {address} "
                         f"({reason}); check the address (HOST:PORT of the head node, or "
                         "ray://HOST:10001), or leave it out to run on a local Ray instance"
                         ) from None


def _current_cluster() -> str | None:
    """The address `ray start` recorded on this node (Ray's temporary folder)."""
    folder = os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), "ray")
    try:
        with open(os.path.join(folder, "ray_current_cluster")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def shutdown() -> None:
    """Shut down the Ray that chute started (a local instance) or joined in this process, if
    any, with SIGINT and SIGTERM held until it is done (an interrupted shutdown left Ray's
    agents running); then KeyboardInterrupt if one came. Ray initialised by the caller is left
    alone. `chute convert --engine ray` calls it as it ends."""
    ray = sys.modules.get("ray")
    if not _initialised or ray is None:
        return
    _initialised.clear()
    with HeldSignals() as held:
        if ray.is_initialized():
            ray.shutdown()
    held.check()


def cluster_cpus(ray: Any) -> int:
    """The CPUs of the connected cluster."""
    return int(ray.cluster_resources().get("CPU", 0))


def task_env() -> dict[str, Any]:
    """Remote options giving tasks this process's object storage settings (the AWS_ and
    CHUTE_S3_ variables, the node cache folder): a task on a local instance started earlier,
    or on another node, reaches the same endpoint with the same credentials."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED)}
    return {"runtime_env": {"env_vars": env}} if env else {}
