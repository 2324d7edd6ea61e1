"""`--engine local|ray`, `--ray-address` and `--task-size` of `chute convert` (docs/ray.md)."""

from __future__ import annotations

import argparse

from chute._cli._args import positive
from chute.errors import ChuteError

__all__ = ["add_engine_args", "engine_of"]


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (docs/ray.md)")
    group.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local: this process and its workers (default); ray: Ray tasks on a "
                            "local Ray instance or the cluster at --ray-address")
    group.add_argument("--ray-address", metavar="ADDR", default=None,
                       help="with --engine ray: the cluster to join ('auto' for the one `ray "
                            "start` runs on this node, or ray://HOST:PORT); default: start a "
                            "local instance")
    group.add_argument("--task-size", type=positive(int), default=None, metavar="N",
                       help="with --engine ray: inputs (files, tars, rows) per task (default: "
                            "four tasks per CPU of the cluster); each task ends its last shard "
                            "early, so give a task several shards' worth")


def engine_of(args: argparse.Namespace):
    """The engine the arguments ask for (None: this process); options of the Ray engine
    without `--engine ray` are refused, not ignored."""
    if args.engine != "ray":
        given = [flag for flag, value in (("--ray-address", args.ray_address),
                                          ("--task-size", args.task_size)) if value]
        if given:
            raise ChuteError(f"{', '.join(given)} only apply with --engine ray; add it or "
                             "leave them out")
        return None
    if getattr(args, "workers", None):
        raise ChuteError("--workers does not apply with --engine ray (each Ray task uses one "
                         "CPU; size the work with --task-size and the cluster's CPUs)")
    from chute.ray import RayEngine

    return RayEngine(address=args.ray_address, task_size=args.task_size)
