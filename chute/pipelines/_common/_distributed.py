"""Where this process sits in a distributed job, and which device it should use."""

from __future__ import annotations

import os

import torch

__all__ = ["detect_rank_world", "resolve_device", "default_threads", "physical_cores"]

_SYS_CPU = "/sys/devices/system/cpu"  # where Linux describes each CPU's core (its topology)


def detect_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values win; else initialised torch.distributed; else RANK/WORLD_SIZE; else 0/1."""
    if rank is None or world_size is None:
        auto_rank, auto_world = _detected()
        rank = auto_rank if rank is None else rank
        world_size = auto_world if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"Pipeline got rank={rank}, world_size={world_size}; need 0 <= rank < world_size "
            "(pass rank/world_size explicitly, or fix the RANK/WORLD_SIZE environment variables)"
        )
    return rank, world_size


def _detected() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "WORLD_SIZE" in os.environ:
        return int(os.environ.get("RANK", 0)), int(os.environ["WORLD_SIZE"])
    return 0, 1


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None -> cuda when available else cpu; bare "cuda" -> cuda:LOCAL_RANK under a launcher."""
    from chute._device import cuda_device_count, require_cuda

    if device is None:
        device = "cuda" if cuda_device_count() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):  # torch's own message lists every device type it knows
        raise ValueError(f"Pipeline device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") \
            from None
    if device.type == "cuda":
        require_cuda("Pipeline", str(device))
        if device.index is None:
            local = os.environ.get("LOCAL_RANK")
            index = int(local) if local is not None else torch.cuda.current_device()
            device = torch.device("cuda", index)
    elif device.type != "cpu":
        raise ValueError(f"Pipeline device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def default_threads() -> tuple[int, str]:
    """(decoder threads for this process, where the number comes from).

    OMP_NUM_THREADS wins (torchrun sets it); else the usable physical cores (SMT siblings count
    once: two decoder threads on one core share its units; docs/images.md) shared among the
    ranks of this machine (LOCAL_WORLD_SIZE, set by torchrun), so that ranks do not
    oversubscribe them.
    """
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env), f"OMP_NUM_THREADS={env}"
    cpus = (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else list(range(os.cpu_count() or 1)))
    cores = physical_cores(cpus)
    local = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    smt = f" ({len(cpus)} logical)" if cores != len(cpus) else ""
    return (max(1, cores // ranks),
            f"{cores} physical cores{smt} / {ranks} local rank(s)")


def physical_cores(cpus: list[int]) -> int:
    """How many physical cores the logical CPUs `cpus` are on (their count where Linux does not
    say: no /sys topology).

    Args:
        cpus: logical CPU numbers (e.g. this process's affinity).
    """
    cores = set()
    for cpu in cpus:
        topology = os.path.join(_SYS_CPU, f"cpu{cpu}", "topology")
        try:
            with open(os.path.join(topology, "core_id")) as f:
                core = f.read().strip()
            with open(os.path.join(topology, "physical_package_id")) as f:
                package = f.read().strip()
        except OSError:
            return len(cpus)
        cores.add((package, core))
    return max(1, len(cores))
