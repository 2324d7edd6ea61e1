"""`--engine local|ray`, `--ray-address` and `--task-size` of `chute convert` (docs/ray.md)."""

from __future__ import annotations

import argparse

from chute._cli._args import positive
from chute.errors import ChuteError

__all__ = ["add_engine_args", "engine_of", "engine_usage", "ray_address"]


def ray_address(text: str) -> str:
    """An argparse `type` for --ray-address: auto, HOST:PORT or ray://HOST:PORT (a port of
    digits), checked before anything starts.

    Args:
        text: the argument.
    """
    if text == "auto":
        return text
    host, colon, port = text.removeprefix("ray://").rpartition(":")
    if not colon or not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected auto, HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379), got {text!r}")
    return text


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (docs/ray.md)")
    group.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local: this process and its workers (default); ray: Ray tasks on a "
                            "local Ray instance or the cluster at --ray-address")
    group.add_argument("--ray-address", metavar="ADDR", default=None, type=ray_address,
                       help="with --engine ray: the cluster to join ('auto' for the one `ray "
                            "start` runs on this node, or ray://HOST:PORT); default: start a "
                            "local instance")
    group.add_argument("--task-size", type=positive(int), default=None, metavar="N",
                       help="with --engine ray: inputs (files, tars, rows) per task (default: "
                            "four tasks per CPU of the cluster); each task ends its last shard "
                            "early, so give a task several shards' worth")
    parser.set_defaults(check_usage=engine_usage)


def engine_usage(args: argparse.Namespace) -> str | None:
    """The usage error of the engine options, if any (`chute` exits 2 with it): options of
    the Ray engine without `--engine ray`, and `--workers` with it, are refused, not
    ignored."""
    if args.engine != "ray":
        given = [flag for flag, value in (("--ray-address", args.ray_address),
                                          ("--task-size", args.task_size)) if value]
        if given:
            verb, them = ("applies", given[0]) if len(given) == 1 else ("apply", "them")
            return (f"{' and '.join(given)} {verb} only with --engine ray; add --engine ray, "
                    f"or leave {them} out")
        return None
    if getattr(args, "workers", None):
        return ("--workers does not apply with --engine ray: each Ray task uses one CPU; size "
                "the work with --task-size and the cluster's CPUs")
    return None


def engine_of(args: argparse.Namespace):
    """The engine the arguments ask for (None: this process)."""
    problem = engine_usage(args)
    if problem:
        raise ChuteError(problem)
    if args.engine != "ray":
        return None
    from chute.ray import RayEngine

    return RayEngine(address=args.ray_address, task_size=args.task_size)
