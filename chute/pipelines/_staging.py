"""Output slots: preallocated batch buffers on the host (pinned for CUDA) and on the device.

A slot holds one batch: one flat buffer per output key, sized for the largest batch that key
can have; a batch uses the contiguous prefix of each buffer viewed in that batch's shape (so
shapes may change from batch to batch, e.g. ragged arrays or buckets). On the CPU the device
tensors alias the host arrays (torch.from_numpy, zero copy). With a CUDA device the host arrays
are pinned and `stage` copies them with non_blocking=True on the producer's side stream, after
waiting on the event the consumer recorded when it released the slot; `ready` is recorded after
the copies and the consumer's stream waits on it before using the tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from chute._device import require_cuda

__all__ = ["Slot", "allocate_slots", "begin_fill", "host_views", "device_views", "stage",
           "wait_ready", "release"]


@dataclass
class Slot:
    host: dict[str, np.ndarray]  # flat host buffers the producers write
    device: dict[str, torch.Tensor]  # flat buffers the consumer gets (alias `host` on the CPU)
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
    """`count` slots with room for arrays of the given (largest) shapes and dtypes. Keys in
    `device_only` get no host array (a device producer writes them in place)."""
    return [_allocate(shapes, device, device_only) for _ in range(count)]


def _allocate(shapes, device: torch.device, device_only) -> Slot:
    sizes = {k: (max(1, math.prod(shape)), dtype) for k, (shape, dtype) in shapes.items()}
    if device.type == "cpu":
        host = {k: np.zeros(n, dtype) for k, (n, dtype) in sizes.items()}
        return Slot(host=host, device={k: torch.from_numpy(a) for k, a in host.items()})
    require_cuda("the Pipeline's device staging", str(device))
    host_tensors, dev = {}, {}
    for key, (n, dtype) in sizes.items():
        tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
        dev[key] = torch.empty(n, dtype=tdtype, device=device)
        if key not in device_only:
            host_tensors[key] = torch.zeros(n, dtype=tdtype, pin_memory=True)
    return Slot(
        host={k: t.numpy() for k, t in host_tensors.items()},
        device=dev,
        host_tensors=host_tensors,
        ready=torch.cuda.Event(),
        released=torch.cuda.Event(),
        cuda_device=device,
    )


def host_views(slot: Slot, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """This batch's host arrays: the prefix of each flat buffer in the batch's shape."""
    return {k: slot.host[k][:math.prod(s)].reshape(s) for k, s in shapes.items()
            if k in slot.host}


def device_views(slot: Slot, shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """This batch's tensors for the consumer (contiguous views of the flat buffers)."""
    return {k: slot.device[k][:math.prod(s)].view(s) for k, s in shapes.items()
            if k in slot.device}


def begin_fill(slot: Slot, stream) -> None:
    """Producer, before writing a slot: host buffers free, device writes ordered after release."""
    if slot.ready is None:
        return
    slot.ready.synchronize()  # the previous host->device copy out of these host arrays is done
    if slot.released_recorded:
        stream.wait_event(slot.released)


def stage(slot: Slot, shapes: dict[str, tuple[int, ...]], stream) -> None:
    """Producer: copy this batch's prefix of every host buffer to the device; record `ready`."""
    if slot.ready is None:
        return  # CPU: the consumer's tensors are the host arrays
    with torch.cuda.stream(stream):
        for key, host in slot.host_tensors.items():
            n = math.prod(shapes[key])
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
