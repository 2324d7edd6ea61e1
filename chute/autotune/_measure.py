"""The measurement harness: warm up a batch source, then time a steady-state window.

Warm-up (JIT compilation, first touch of the memory maps, pool start-up) is excluded. In the
window we count images per wall-clock second, the process CPU time per wall second (%, summed
over threads, so 200 means two cores busy; as `top` reports it) and, on a CUDA device with
pynvml, the mean GPU utilisation sampled by NVML.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from chute.autotune._gpu import GpuSampler

__all__ = ["BatchSource", "BatchSourceLike", "Measurement", "BudgetExhausted", "measure"]


def _nothing() -> None:
    return None


@runtime_checkable
class BatchSourceLike(Protocol):
    """What the harness drives: any object with these three methods (see `BatchSource`)."""

    def next_batch(self) -> int: ...
    def synchronize(self) -> None: ...
    def close(self) -> None: ...


@dataclass
class BatchSource:
    """A `BatchSourceLike` made of three functions. `next_batch()` produces one batch and
    returns its image count; `synchronize()` waits for queued device work (so the window's end
    time is honest); `close()` releases threads and memory."""

    next_batch: Callable[[], int]
    synchronize: Callable[[], None] = _nothing
    close: Callable[[], None] = _nothing


@dataclass(frozen=True)
class Measurement:
    img_per_s: float
    cpu_percent: float
    gpu_percent: float | None
    images: int
    batches: int
    seconds: float
    warmup_seconds: float
    cut_short: bool = False  # the budget ended the window before `window` seconds
    over_budget: bool = False  # warm-up ended past the deadline (finish_past_deadline)


class BudgetExhausted(Exception):
    """The total budget ran out before the candidate produced a steady-state measurement."""


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def measure(
    source: BatchSourceLike,
    *,
    window: float,
    deadline: float,
    device: str = "cpu",
    warmup_batches: int = 2,
    min_batches: int = 3,
    finish_past_deadline: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Warm `source` up with `warmup_batches`, then run it for `window` seconds (and at least
    `min_batches` batches) unless `deadline` (a `clock()` time) comes first.

    Raises BudgetExhausted when the deadline passes before any steady-state batch completed --
    unless `finish_past_deadline`, which completes the warm-up and `min_batches` whatever the
    deadline (so a first-run JIT compile longer than the budget still yields one measurement).
    Exceptions of the source propagate (the caller records them as the candidate's failure).

    Args:
        source: what to drive (see `BatchSourceLike`); not closed here.
        window: seconds of steady state to time.
        deadline: the `clock()` time by which measuring must end.
        device: "cuda:N" samples that GPU's utilisation during the window.
        warmup_batches: batches run before the window.
        min_batches: fewest batches the window counts.
        finish_past_deadline: complete warm-up and `min_batches` even past `deadline`.
        clock: the time source (tests pass a fake one).
    """
    start = clock()

    def check_budget() -> None:
        if clock() >= deadline and not finish_past_deadline:
            raise BudgetExhausted(f"budget ran out during warm-up ({clock() - start:.1f}s)")

    for _ in range(warmup_batches):
        check_budget()
        source.next_batch()
    source.synchronize()
    warmed = clock()
    check_budget()

    images = batches = 0
    cut_short = False
    cpu_start = _cpu_seconds()
    with GpuSampler(device) as gpu:
        t0 = clock()
        while True:
            images += int(source.next_batch())
            batches += 1
            now = clock()
            if batches >= min_batches and now - t0 >= window:
                break
            if now >= deadline and (batches >= min_batches or not finish_past_deadline):
                cut_short = True
                break
        source.synchronize()
        elapsed = max(clock() - t0, 1e-9)
    cpu = _cpu_seconds() - cpu_start
    return Measurement(
        img_per_s=images / elapsed,
        cpu_percent=100.0 * cpu / elapsed,
        gpu_percent=gpu.mean,
        images=images,
        batches=batches,
        seconds=elapsed,
        warmup_seconds=warmed - start,
        cut_short=cut_short,
        over_budget=warmed >= deadline,
    )
