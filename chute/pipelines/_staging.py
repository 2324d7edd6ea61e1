"""Output slots: preallocated batch buffers on the host (pinned for CUDA) and on the device.

A slot holds one batch: "image" plus int64 "index" and the requested scalar columns, each at the
full batch size (a short batch uses the first B rows). On the CPU the device tensors alias the
host arrays (torch.from_numpy, zero copy). With a CUDA device the host arrays are pinned and
`stage` copies them with non_blocking=True on the producer's side stream, after waiting on the
event the consumer recorded when it released the slot; `ready` is recorded after the copies and
the consumer's stream waits on it before using the tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from chute._device import require_cuda

__all__ = ["Slot", "allocate_slots", "begin_fill", "stage", "wait_ready", "release"]


@dataclass
class Slot:
    host: dict[str, np.ndarray]  # full-size host arrays the producer writes
    device: dict[str, torch.Tensor]  # what the consumer gets (aliases `host` on the CPU)
    host_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    ready: Any = None  # torch.cuda.Event: copies (and device writes) done
    released: Any = None  # torch.cuda.Event: consumer's work on `device` done
    released_recorded: bool = False
    cuda_device: torch.device | None = None


def allocate_slots(
    count: int,
    shapes: dict[str, tuple[tuple[int, ...], np.dtype]],
    device: torch.device,
    device_only: tuple[str, ...] = (),
) -> list[Slot]:
    """`count` slots with arrays of the given shapes/dtypes. Keys in `device_only` get no host
    array (a device backend writes them in place)."""
    return [_allocate(shapes, device, device_only) for _ in range(count)]


def _allocate(shapes, device: torch.device, device_only) -> Slot:
    if device.type == "cpu":
        host = {k: np.zeros(shape, dtype) for k, (shape, dtype) in shapes.items()}
        return Slot(host=host, device={k: torch.from_numpy(a) for k, a in host.items()})
    require_cuda("the Pipeline's device staging", str(device))
    host_tensors, dev = {}, {}
    for key, (shape, dtype) in shapes.items():
        tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
        dev[key] = torch.empty(shape, dtype=tdtype, device=device)
        if key not in device_only:
            host_tensors[key] = torch.zeros(shape, dtype=tdtype, pin_memory=True)
    return Slot(
        host={k: t.numpy() for k, t in host_tensors.items()},
        device=dev,
        host_tensors=host_tensors,
        ready=torch.cuda.Event(),
        released=torch.cuda.Event(),
        cuda_device=device,
    )


def begin_fill(slot: Slot, stream) -> None:
    """Producer, before writing a slot: host buffers free, device writes ordered after release."""
    if slot.ready is None:
        return
    slot.ready.synchronize()  # the previous host->device copy out of these host arrays is done
    if slot.released_recorded:
        stream.wait_event(slot.released)


def stage(slot: Slot, n: int, stream) -> None:
    """Producer: copy the first n rows of every host array to the device; record `ready`."""
    if slot.ready is None:
        return  # CPU: the consumer's tensors are the host arrays
    with torch.cuda.stream(stream):
        for key, host in slot.host_tensors.items():
            slot.device[key][:n].copy_(host[:n], non_blocking=True)
        slot.ready.record(stream)


def wait_ready(slot: Slot) -> None:
    """Consumer: order its stream after the slot's copies."""
    if slot.ready is not None:
        torch.cuda.current_stream(slot.cuda_device).wait_event(slot.ready)


def release(slot: Slot) -> None:
    """Consumer: the batch is no longer valid; later writes wait for work queued so far."""
    if slot.ready is not None:
        slot.released.record(torch.cuda.current_stream(slot.cuda_device))
        slot.released_recorded = True
