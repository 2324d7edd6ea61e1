"""InferServer: the running pipeline. Requests enter the first stage's bounded queue, each stage's
replicas take dynamic batches from their queue, and outputs move on to the next stage's queue,
waiting for room there (back-pressure) (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import itertools
import logging
import multiprocessing.process
import operator
import os
import queue
import sys
import threading
import time
from multiprocessing.connection import wait as wait_for_any
from typing import Any

from chute.errors import ChuteError
from chute.infer._build import check_spec
from chute.infer._config import InferConfig
from chute.infer._replica_handle import (
    NO_MAIN_GUARD_EXIT,
    REPLICA_NAME,
    ReplicaHandle,
    StartupError,
)
from chute.infer._request import InferRequest, StageTimes
from chute.infer._stage import Stage

__all__ = ["InferServer"]

log = logging.getLogger("chute.infer")
_POLL = 0.05
# how long close() waits for a replica's thread before it stops the process under it
_JOIN_S = 10.0


def _refuse_while_importing_main() -> None:
    """Refuse to start a server in a spawned process that is still importing the parent's main
    script (a script without a `__main__` guard): every replica would start a server of its
    own. multiprocessing's own check reads the same flag, but only after the process is
    spawned, with a traceback per replica."""
    current = multiprocessing.process.current_process()
    if not getattr(current, "_inheriting", False):
        return
    if current.name.startswith(REPLICA_NAME):
        sys.exit(NO_MAIN_GUARD_EXIT)  # quietly: the parent reports it, once
    raise ChuteError("InferServer was started while a spawned process imported the main "
                     "script: start it under `if __name__ == \"__main__\":` (see "
                     "docs/inference.md, Scripts)")


def _await_ready(replicas: list[ReplicaHandle], timeout: float,
                 closing: threading.Event) -> None:
    """Wait until every replica in `replicas` is ready; the first that fails raises."""
    deadline = time.monotonic() + timeout
    pending = list(replicas)
    while True:
        pending = [r for r in pending if not r.check_ready()]
        if not pending:
            return
        if closing.is_set():
            raise StartupError("the pipeline closed while its replicas were starting")
        if time.monotonic() > deadline:
            r = pending[0]
            raise StartupError(f"replica {r.index} of stage {r.stage.name!r} was not ready "
                               f"after {timeout:.0f} s")
        handles: list[Any] = []
        for r in pending:
            process, conn = r.process, r.conn
            assert process is not None and conn is not None  # spawned
            handles += [conn, process.sentinel]
        wait_for_any(handles, _POLL)


def _own_memory(output: Any) -> Any:
    """A final output that no longer maps a replica's shared memory (so closing frees it)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.clone() if output.is_shared() else output
    if isinstance(output, (list, tuple)):
        return type(output)(_own_memory(x) for x in output)
    if isinstance(output, dict):
        return {k: _own_memory(v) for k, v in output.items()}
    return output


class InferServer:
    """A running inference pipeline.

    Args:
        config: the stages.
        startup_timeout: seconds a replica may take to build its stage.

    Use it as a context manager (or call `close()`): closing stops every replica process and
    releases the shared memory of tensors in flight.

        with InferServer(config) as server:
            request = server.submit(sample_id)      # None when the first queue is full
            server.wait([request])
            request.output, request.stages["model"].batch_size
    """

    def __init__(self, config: InferConfig, *, startup_timeout: float = 300.0):
        self.config = config
        self.startup_timeout = startup_timeout
        self.closing = threading.Event()
        self.events: list[str] = []
        self.stages: list[Stage] = []
        self.completed: list[InferRequest] = []
        self.dropped = 0
        self._ids = itertools.count()
        self._done = threading.Condition()
        self._closed = False
        _refuse_while_importing_main()
        import torch.multiprocessing  # noqa: F401  (tensors in messages go through shared memory)

        for stage_config in config.stages:
            try:
                check_spec(stage_config.fn, config.base)
            except ChuteError as exc:
                raise StartupError(f"stage {stage_config.name!r} cannot be built: {exc}") \
                    from None
        self._samples = _loader_samples(config)
        self.stages = [Stage(c, k, self) for k, c in enumerate(config.stages)]
        # One replica of every stage first: a stage that cannot be built fails once, before
        # the other replicas are spawned.
        waves = [[s.replicas[0] for s in self.stages],
                 [r for s in self.stages for r in s.replicas[1:]]]
        try:
            for wave in waves:
                for replica in wave:
                    replica.spawn()
                _await_ready(wave, startup_timeout, self.closing)
        except BaseException:
            self.close()
            raise
        for stage in self.stages:
            for replica in stage.replicas:
                replica.thread.start()

    def __enter__(self) -> InferServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------
    def submit(self, item: Any, *, block: bool = False,
               timeout: float | None = None) -> InferRequest | None:
        """Offer one request to the first stage.

        Args:
            item: the first stage's input (for the video loader, a sample id).
            block: wait for room in the first queue instead of dropping the request.
            timeout: with block, the longest wait (None: no limit).

        Returns:
            The request's record, or None when it was not accepted: dropped (the first queue
            was full; counted in `dropped`), or with block, no room within `timeout`.
        """
        if self.closing.is_set():
            raise RuntimeError("this InferServer is closed")
        self._check_sample_id(item)
        request = InferRequest(next(self._ids), item, time.monotonic())
        first = self.stages[0]
        request.stages[first.name] = StageTimes(enqueued=request.submitted)
        try:
            first.queue.put((request, item), block=block, timeout=timeout)
        except queue.Full:
            if not block:
                self.dropped += 1
            return None
        return request

    def _check_sample_id(self, item: Any) -> None:
        """A sample id past the first stage's dataset is the caller's mistake: refused here,
        not returned later as a failed request (docs/inference.md, "Requests")."""
        if self._samples is None:
            return
        wanted: Any = item.get("video") if isinstance(item, dict) else item
        if isinstance(wanted, (bool, float, str, os.PathLike)):
            return  # paths are the loader's to check; a bool or float it refuses itself
        try:
            sample = operator.index(wanted)
        except TypeError:
            return
        path, count = self._samples
        if not 0 <= sample < count:
            raise IndexError(f"request {item!r:.60}: sample id {sample} is out of range for "
                             f"{path} ({count} samples: ids 0 to {count - 1}); submit ids in "
                             "that range")

    def forward(self, position: int, request: InferRequest, output: Any) -> None:
        """Hand `output` of stage `position` to the next stage (waiting for room) or finish."""
        if position + 1 == len(self.stages):
            request.output = _own_memory(output)
            self._finish(request)
            return
        stage = self.stages[position + 1]
        times = StageTimes(enqueued=time.monotonic())
        request.stages[stage.name] = times
        while True:
            try:
                stage.queue.put((request, output), timeout=_POLL)
                return
            except queue.Full:
                if self.closing.is_set():
                    self.fail(request, stage.name, "the pipeline was closed")
                    return

    def fail(self, request: InferRequest, stage: str, message: str) -> None:
        """Finish `request` as failed in `stage`."""
        request.error = f"stage {stage}: {message}"
        self._finish(request)

    def _finish(self, request: InferRequest) -> None:
        with self._done:
            request.done = time.monotonic()
            self.completed.append(request)
            self._done.notify_all()

    def wait(self, requests: list[InferRequest], timeout: float | None = None,
             progress=None) -> bool:
        """Wait until every request in `requests` has finished.

        Args:
            requests: the records `submit` returned (None entries are ignored).
            timeout: seconds; None waits as long as it takes.
            progress: optional tqdm-like bar, advanced as requests finish.

        Returns:
            True if all finished, False on timeout.
        """
        pending = [r for r in requests if r is not None]
        deadline = None if timeout is None else time.monotonic() + timeout
        shown = sum(r.finished for r in pending)
        if progress is not None:
            progress.update(shown)
        with self._done:
            while True:
                finished = sum(r.finished for r in pending)
                if progress is not None and finished > shown:
                    progress.update(finished - shown)
                    shown = finished
                if finished == len(pending):
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done.wait(_POLL if left is None else min(left, _POLL))

    def set_batching(self, stage: str, max_batch: int, max_wait_ms: float | None = None) -> None:
        """Change a stage's dynamic batching while it runs (the replicas keep running).

        Args:
            stage: the stage's name.
            max_batch: the most requests per call from now on.
            max_wait_ms: the new wait for more requests (None keeps it).
        """
        import dataclasses

        (target,) = [s for s in self.stages if s.name == stage]
        changes: dict[str, Any] = {"max_batch": max_batch}
        if max_wait_ms is not None:
            changes["max_wait_ms"] = max_wait_ms
        target.config = dataclasses.replace(target.config, **changes)

    @property
    def failed(self) -> int:
        """Requests that finished with an error."""
        return sum(r.error is not None for r in self.completed)

    @property
    def pids(self) -> list[int]:
        """Every replica process id this server has started."""
        return [pid for stage in self.stages for pid in stage.pids]

    # -- shutdown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every replica process and drop the requests still queued (idempotent; never
        raises, also on a server whose start failed half-way)."""
        if self._closed:
            return
        self._closed = True
        self.closing.set()
        replicas = [r for stage in self.stages for r in stage.replicas]
        for replica in replicas:
            if replica.thread.is_alive():
                replica.thread.join(_JOIN_S)
            if replica.thread.is_alive():
                # stopping the process ends any wait of the thread on it
                self._event(f"replica {replica.index} of stage {replica.stage.name!r} did not "
                            f"stop within {_JOIN_S:g} s; stopping its process")
                self._stop(replica)
                replica.thread.join(_JOIN_S)
        for replica in replicas:
            self._stop(replica)
        for stage in self.stages:
            while True:
                try:
                    request, _ = stage.queue.get_nowait()
                except queue.Empty:
                    break
                self.fail(request, stage.name, "the pipeline was closed before it ran")

    def _stop(self, replica: ReplicaHandle) -> None:
        try:
            replica.stop()
        except Exception as exc:  # noqa: BLE001  (the others must still be stopped)
            self._event(f"replica {replica.index} of stage {replica.stage.name!r} could not "
                        f"be stopped: {type(exc).__name__}: {exc}")

    def _event(self, message: str) -> None:
        log.warning(message)
        self.events.append(message)


def _loader_samples(config: InferConfig) -> tuple[str, int] | None:
    """(dataset, samples) when the first stage is chute's VideoClipLoader reading a dataset,
    whose requests may be sample ids; else None. A dataset that does not open is left to the
    loader's replica, which says why when it starts."""
    from chute.infer._video_loader import VideoClipLoader

    first = config.stages[0]
    named = first.fn in ("chute.infer:VideoClipLoader", "chute.infer._video_loader:"
                         "VideoClipLoader")
    if not (named or first.fn is VideoClipLoader) or first.options is None:
        return None
    dataset = first.options.get("dataset", config.dataset)
    if not isinstance(dataset, (str, os.PathLike)):
        return None
    from chute.readers import open_dataset

    try:
        opened = open_dataset(dataset)
    except (ChuteError, OSError):
        return None
    try:
        return str(dataset), len(opened)
    finally:
        opened.close()
