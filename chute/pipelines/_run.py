"""One pass of a Pipeline over a plan: the slots, every producer's epoch reader, the prefetch
thread, and the fill of one batch (read, substitute failed samples, stage to the device)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from chute.errors import DecodeError
from chute.pipelines._common._options import ring_memory_error, slot_shape
from chute.pipelines._common._stages import StageTimes
from chute.pipelines._prefetch import Prefetcher
from chute.pipelines._staging import (
    allocate_slots,
    begin_fill,
    device_views,
    host_views,
    release,
    stage,
    wait_ready,
)
from chute.pipelines._substitute import Substitutor, failure_reason

__all__ = ["Run", "RunSettings", "SpareSlots"]


@dataclass(frozen=True)
class SpareSlots:
    """The slots of a finished pass, for the next pass of the same Pipeline (CPU device): a
    pass over a short epoch otherwise spends much of its time faulting in fresh pages of its
    slots. `held`: the slots of the last two batches it delivered, which the consumer may still
    use (docs/pipeline.md: a batch stays valid until the next-but-one `next()`); the next pass
    gives them to its producer only as its own `next()` calls expire them."""

    key: tuple
    free: list
    held: list


@dataclass(frozen=True)
class RunSettings:
    """What a pass needs to know of its Pipeline besides the plan.

    Attributes:
        dataset: the open dataset.
        device: the output device.
        batch_size: rows of a slot.
        prefetch: batches prepared ahead (the pass allocates prefetch + 2 slots).
        leave_out: a failed sample is left out of its batch (eval under on_error="skip")
            instead of replaced.
        on_error: "skip" or "raise".
        stages: the Pipeline's stage timers.
        describe: sample id -> where it is (for error messages).
    """

    dataset: Any
    device: torch.device
    batch_size: int
    prefetch: int
    leave_out: bool
    on_error: str
    stages: StageTimes
    describe: Callable[[int], str]


class Run:
    """One pass over a plan: slots, every producer's epoch reader and the prefetch thread.

    Args:
        assembly: the Pipeline's producers and outputs (`_assembly.Assembly`).
        plan: this pass's plan.
        settings: the rest of what the pass needs (RunSettings).
        spare: the previous pass's slots (`spare_slots`), reused when their shapes, dtypes and
            device are this pass's.
    """

    def __init__(self, assembly, plan, settings: RunSettings, spare=None):
        self.outputs = assembly.outputs
        self.producers = assembly.producers
        device, b = settings.device, settings.batch_size
        arrays = {k: (slot_shape(b, o), o.dtype) for k, o in self.outputs.items()
                  if o.dtype is not None}
        arrays["index"] = ((b,), np.dtype(np.int64))
        on_device = tuple(k for k, o in self.outputs.items() if o.on_device)
        count = settings.prefetch + 2
        self.slot_key = (count, tuple(sorted((k, s, np.dtype(d).str) for k, (s, d)
                                             in arrays.items())),
                         str(device), on_device, os.getpid())
        inherited = []  # the previous pass's held slots (see SpareSlots)
        if spare is not None and spare.key == self.slot_key:
            slots, inherited = list(spare.free), list(spare.held)
        else:
            try:
                slots = allocate_slots(count, arrays, device, device_only=on_device)
            except (MemoryError, torch.OutOfMemoryError) as exc:
                raise ring_memory_error(count, b, self.outputs, settings.dataset.path,
                                        f"which could not be allocated ({exc})") from None
        self.slots = slots + inherited
        # slots of the batches yielded last and before last: still valid (at first, those of
        # the previous pass, when this one reuses its slots)
        self.held = list(inherited)
        self.reusable = device.type == "cpu"
        self.stages: StageTimes = settings.stages
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.plan = plan
        self.readers = []
        self.read_ahead = None
        # eval delivers every sample at most once: a failed one is left out, since any
        # substitute is a sample the pass delivers anyway (docs/pipeline.md, "Bad samples")
        self.leave_out = settings.leave_out
        # fields whose failures carry a decoder's status (chute.fallbacks._status)
        self.statused = frozenset(f for f, family in assembly.families.items()
                                  if family.decoder_status)
        try:  # an epoch reader may hold batches in flight: closed whatever fails after it opens
            for producer in self.producers:
                self.readers.append(producer.open_epoch(plan, 0))
            self.substitutor = Substitutor(settings.dataset, plan, self.producers, self.outputs,
                                           settings.on_error, describe=settings.describe,
                                           device=device)
            # a remote dataset fetches the shards of this pass ahead of it (docs/storage.md)
            self.read_ahead = _read_ahead(settings.dataset, plan)
            self.prefetcher = Prefetcher(slots, self.fill, range(len(plan)))
        except BaseException:
            if self.read_ahead is not None:
                self.read_ahead.close()
            self._close_readers()
            raise

    def fill(self, slot, iteration: int):
        measure = self.stages.measure
        stream_ctx = torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()
        with stream_ctx:
            with measure("plan"):
                request = self.plan.request(iteration)
                begin_fill(slot, self.stream)
                request, shapes, host, out = self._views(slot, request)
            failed = np.zeros(len(request.ids), dtype=bool)
            reasons = {}  # row -> why it failed first (for on_error="raise")
            for producer, reader in zip(self.producers, self.readers, strict=True):
                with measure(producer.field):
                    status = reader.read(request, {k: out[k] for k in producer.outputs()})
                    status = np.asarray(status).reshape(len(request.ids))
                    for row in np.flatnonzero((status != 0) & ~failed).tolist():
                        reasons[row] = failure_reason(producer.field, int(status[row]),
                                                      producer.field in self.statused)
                    failed |= status != 0
            with measure("substitute"):
                if self.leave_out and failed.any():
                    ids, replaced, reread = request.ids[~failed], [
                        (int(request.ids[row]), None, reasons.get(row))
                        for row in np.flatnonzero(failed).tolist()], False
                    shapes, host, out = _leave_out(slot, ~failed, shapes, out)
                else:
                    ids, replaced, reread = self.substitutor.fix(request.ids, failed, out,
                                                                 shapes, request,
                                                                 reasons=reasons)
                if reread:  # a substitute is larger than this batch's shapes: read it again
                    request, shapes, host, out = self._reread(slot, ids, request)
            with measure("stage"):
                host["index"][...] = ids
                stage(slot, shapes, self.stream)
        lists = {k: out[k] for k, o in self.outputs.items() if o.dtype is None}
        return shapes, lists, replaced

    def _views(self, slot, request):
        """The request with this batch's shapes, and the slot viewed in them."""
        n = len(request.ids)
        shapes = {"index": (n,)}
        for producer in self.producers:
            shapes.update(producer.shapes(request))
        request = replace(request, shapes=shapes)
        host = host_views(slot, shapes)
        # on_device outputs: a tensor on the Pipeline's device (on the CPU, aliasing `host`)
        device = device_views(slot, shapes)
        out = {k: [None] * n if o.dtype is None else (device[k] if o.on_device else host[k])
               for k, o in self.outputs.items()}
        return request, shapes, host, out

    def _reread(self, slot, ids, failed_request):
        substituted = self.plan.request_for(ids, like=failed_request)
        substituted = replace(substituted, iteration=failed_request.iteration)
        request, shapes, host, out = self._views(slot, substituted)
        for producer in self.producers:
            status = producer.fill(request, {k: out[k] for k in producer.outputs()})
            if np.asarray(status).any():
                raise DecodeError(f"batch {request.iteration} of {self.plan.dataset}: a sample "
                                  "that read correctly failed when read again with its "
                                  "substitutes; run `chute verify` on the dataset")
        return request, shapes, host, out

    def batches(self, stats, closed: Callable[[], bool]):
        """Yield (iteration, batch on the device, failures) for every batch of the plan, each
        valid until the next-but-one is taken, counting waits and samples in `stats`.

        Args:
            stats: the Pipeline's PipelineStats.
            closed: says whether the Pipeline was closed (a stopped run then just ends).
        """
        for k in range(len(self.plan)):
            while len(self.held) > 1:
                self.release(self.held.pop(0))  # the batch before the previous one expires
            t0 = time.perf_counter()
            try:
                slot, (shapes, lists, replaced) = self.prefetcher.get()
            except StopIteration:  # the run was stopped under us
                if closed():
                    return  # close() during the loop ends it
                raise RuntimeError(
                    "this iterator of the Pipeline was stopped by a newer pass (iter(), "
                    "set_epoch or load_state_dict); iterate the new one") from None
            stats.wait_seconds += (waited := time.perf_counter() - t0)
            self.stages.add("wait", waited)
            self.held.append(slot)
            wait_ready(slot)
            batch = device_views(slot, shapes)
            batch.update(lists)
            stats.samples += shapes["index"][0]
            stats.batches += 1
            yield k, batch, replaced

    def spare_slots(self) -> SpareSlots | None:
        """After close(): this pass's slots for the next pass, the slots the consumer may still
        use apart; None where slots are not reused (CUDA staging keeps its own)."""
        if not self.reusable:
            return None
        kept = {id(slot) for slot in self.held}
        return SpareSlots(self.slot_key, [s for s in self.slots if id(s) not in kept],
                          list(self.held))

    def release(self, slot) -> None:
        release(slot)
        self.prefetcher.release(slot)

    def _close_readers(self) -> None:
        readers, self.readers = self.readers, []
        for reader in readers:
            reader.close()

    def close(self) -> None:
        try:
            if self.read_ahead is not None:
                self.read_ahead.close()
        finally:
            try:
                self.prefetcher.close()
                if self.stream is not None:  # kernels/copies may still write these slots
                    self.stream.synchronize()
            finally:  # epoch readers release their batches in flight whatever failed above
                self._close_readers()
                # An unfinished loop's generator keeps this run alive: drop what holds the
                # dataset's maps, so Pipeline.close() releases them at once (not at gc).
                self.readers, self.producers = [], ()
                self.substitutor = None  # type: ignore[assignment]  # the pass is over


def _leave_out(slot, keep: np.ndarray, shapes: dict, out: dict):
    """The batch without its failed rows: the kept rows move up (every output, so a row's
    fields stay together) and the batch's shapes lose the failed rows (a batch whose every
    row failed has none). Returns the new shapes, host views and outputs."""
    n = int(keep.sum())
    rows = np.flatnonzero(keep)
    for value in out.values():
        if isinstance(value, list):
            value[:] = [value[r] for r in rows.tolist()]
        elif isinstance(value, torch.Tensor):
            value[:n] = value[torch.from_numpy(rows).to(value.device)]
        else:
            value[:n] = value[rows]
    shapes = {k: (n, *s[1:]) for k, s in shapes.items()}
    host = host_views(slot, shapes)
    device = device_views(slot, shapes)
    out = {k: v if isinstance(v, list) else
           (device[k] if isinstance(v, torch.Tensor) else host[k]) for k, v in out.items()}
    return shapes, host, out


def _read_ahead(dataset, plan):
    """The dataset's fetch-ahead of this pass's batches (None when it has nothing to fetch:
    a local dataset)."""
    ids = getattr(plan, "ids", None)
    return dataset.prefetch(ids(i) if ids is not None else plan.request(i).ids
                    for i in range(len(plan)))
