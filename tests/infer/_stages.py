"""Stage callables for the infer tests (importable by spawned replicas as tests.infer._stages)."""

from __future__ import annotations

import os
import time

import torch


def double(items: list) -> list:
    """x -> 2x as a float tensor."""
    return [torch.tensor([2.0 * float(x)]) for x in items]


def fail_on_three(items: list) -> list:
    """Raises for the whole batch when it holds a 3 (the pipeline must fail only that one)."""
    if any(int(x) == 3 for x in items):
        raise ValueError("input 3 is refused")
    return [torch.tensor([float(x)]) for x in items]


def slow(items: list) -> list:
    """Takes 0.2 s per call, returns each input as a tensor."""
    time.sleep(0.2)
    return [torch.tensor([float(x)]) for x in items]


def pid(items: list) -> list:
    """The replica's process id for each input (after a short pause)."""
    time.sleep(0.05)
    return [torch.tensor([os.getpid()]) for _ in items]


def make_scaler(factor: float, device: str = "cpu"):
    """A factory: the stage multiplies by `factor` (and was told its device)."""
    assert device == "cpu"
    return lambda items: torch.stack([torch.as_tensor(x, dtype=torch.float32) for x in items]) \
        * factor


def unpicklable(items: list) -> list:
    """Outputs that cannot cross a process boundary (a lambda), except for input 0."""
    return [torch.tensor([0.0]) if int(x) == 0 else (lambda: None) for x in items]


def nested(items: list) -> list:
    """Each output is a dict holding a list of tensors."""
    return [{"x": [torch.full((4,), float(x)), torch.zeros(2)]} for x in items]


def to_cuda(items: list) -> list:
    """x -> 2x as a CUDA tensor (a GPU stage whose outputs stay on the GPU)."""
    return [torch.tensor([2.0 * float(x)], device="cuda:0") for x in items]


def where(items: list) -> list:
    """Each input's value and whether it arrived as a CUDA tensor."""
    return [torch.tensor([float(x.sum()), float(x.is_cuda)]) for x in items]


def bad_handle(items: list) -> list:
    """A CUDA IPC handle that names nothing for input 3, the input itself for the others."""
    from chute.infer._cuda_ipc import CudaShared

    return [CudaShared(b"not a handle") if int(x) == 3 else torch.tensor([float(x)])
            for x in items]


def is_shared(items: list) -> list:
    """Whether each input tensor arrived in shared memory (not pickled by value)."""
    return [torch.tensor([float(x.is_shared())]) for x in items]



def slow_marked(items: list) -> list:
    """`slow`, and leaves a file named after this replica's pid in $CHUTE_TEST_MARKS (so a test
    outside the pipeline sees which replicas serve requests)."""
    from pathlib import Path

    (Path(os.environ["CHUTE_TEST_MARKS"]) / str(os.getpid())).touch()
    return slow(items)


def held_once(items: list) -> list:
    """The first call anywhere leaves `held` in $CHUTE_TEST_MARKS and then sleeps 60 s (a
    test kills the replica meanwhile); every later call is `slow`."""
    from pathlib import Path

    try:
        with open(Path(os.environ["CHUTE_TEST_MARKS"]) / "held", "x"):
            pass
    except FileExistsError:
        return slow(items)
    time.sleep(60)
    return [torch.tensor([float(x)]) for x in items]


def always_fails(items: list) -> list:
    """Every request fails."""
    raise ValueError("this stage refuses everything")


def broken_factory(**options):
    """A factory that cannot build its stage."""
    raise ZeroDivisionError("the model cannot be built")
