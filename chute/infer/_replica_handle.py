"""The parent's side of one replica: its process, and the thread that forms its batches from the
stage's queue (dynamic batching), sends them, routes the results, and restarts the process when
it dies (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from chute.errors import ChuteError
from chute.infer._cuda_ipc import on_cuda
from chute.infer._replica import Failure, replica_main

__all__ = ["ReplicaHandle", "StartupError"]

log = logging.getLogger("chute.infer")
_POLL = 0.05


class StartupError(ChuteError):
    """A replica could not build its stage."""


class ReplicaHandle:
    """Replica `index` of `stage` (a `chute.infer._stage.Stage`)."""

    def __init__(self, stage, index: int):
        self.stage = stage
        self.index = index
        self.process: BaseProcess | None = None  # None: not spawned, stopped or failed
        self.conn: Connection | None = None  # the parent's end of the pipe to `process`
        self.pids: list[int] = []  # every process this replica has had
        self.thread = threading.Thread(target=self._loop, daemon=True,
                                       name=f"chute-infer-{stage.name}-{index}")

    # -- process ----------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the process (without waiting for it to be ready)."""
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        config = self.stage.config
        following = self.stage.server.config.stages[self.stage.position + 1:]
        send_cuda = bool(following) and on_cuda(following[0].devices)
        self.process = process = ctx.Process(
            target=replica_main, daemon=True, name=f"chute-infer-{config.name}-{self.index}",
            args=(child, config.fn, config.options, self.stage.base, config.device(self.index),
                  self.stage.dataset, config.threads, send_cuda))
        process.start()
        child.close()
        self.conn = parent
        assert process.pid is not None  # started
        self.pids.append(process.pid)

    def _started(self) -> tuple[BaseProcess, Connection]:
        """The process and the pipe to it (set by `spawn`)."""
        process, conn = self.process, self.conn
        assert process is not None and conn is not None, "the replica has no process"
        return process, conn

    def await_ready(self, timeout: float) -> None:
        """Wait until the process has built its stage; raise StartupError if it cannot."""
        process, conn = self._started()
        deadline = time.monotonic() + timeout
        while not conn.poll(_POLL):
            if self.stage.server.closing.is_set():
                raise StartupError(f"the pipeline closed while replica {self.index} of stage "
                                   f"{self.stage.name!r} was starting")
            if not process.is_alive():
                raise StartupError(f"replica {self.index} of stage {self.stage.name!r} exited "
                                   f"while starting (exit code {process.exitcode})")
            if time.monotonic() > deadline:
                raise StartupError(f"replica {self.index} of stage {self.stage.name!r} was not "
                                   f"ready after {timeout:.0f} s")
        kind, detail = conn.recv()
        if kind == "error":
            raise StartupError(f"stage {self.stage.name!r} (fn {self.stage.config.fn!r}) could "
                               f"not be built in replica {self.index}:\n{detail}")

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the process to exit, then make sure it has."""
        process, conn = self.process, self.conn
        if process is None:
            return
        assert conn is not None  # set with the process
        try:
            conn.send(("stop",))
        except (BrokenPipeError, OSError):
            pass
        process.join(timeout)
        if process.is_alive():
            process.terminate()
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
        conn.close()
        process.close()
        self.process = None

    def _restart(self, process: BaseProcess, why: str) -> None:
        stage = self.stage
        process.join(1.0)  # reaped, so its exit code (e.g. -9 for SIGKILL) is known
        message = (f"replica {self.index} of stage {stage.name!r} (pid {process.pid}) "
                   f"{why} (exit code {process.exitcode}); restarting it")
        log.warning(message)
        stage.server.events.append(message)
        stage.restarts += 1
        self.stop(timeout=1.0)
        self._respawn()

    def _respawn(self) -> None:
        stage = self.stage
        if stage.server.closing.is_set():
            return
        try:
            self.spawn()
            self.await_ready(stage.server.startup_timeout)
        except StartupError as exc:
            self.stop(timeout=1.0)
            stage.server.events.append(f"restart failed: {exc}")
            log.error("restart failed: %s", exc)

    # -- batching and routing (runs in self.thread) -----------------------------------------
    def _take(self) -> list:
        """A batch: the first request waits as long as needed, then up to max_batch - 1 more
        that are queued or arrive within max_wait_ms."""
        q = self.stage.queue
        config = self.stage.config
        try:
            first = q.get(timeout=_POLL)
        except queue.Empty:
            return []
        batch = [first]
        deadline = time.monotonic() + config.max_wait_ms / 1000
        while len(batch) < config.max_batch:
            remaining = deadline - time.monotonic()
            try:
                batch.append(q.get(timeout=remaining) if remaining > 0 else q.get_nowait())
            except queue.Empty:
                break
        return batch

    def _reply(self, process: BaseProcess, conn: Connection):
        """The process's answer to the batch it holds; None if it died meanwhile."""
        while True:
            if conn.poll(_POLL):
                try:
                    return conn.recv()
                except Exception:  # noqa: BLE001  (a pipe or a shared tensor of a dead process)
                    return None
            if not process.is_alive() or self.stage.server.closing.is_set():
                return None

    def _loop(self) -> None:
        stage = self.stage
        server = stage.server
        closing = server.closing
        while not closing.is_set():
            process, conn = self.process, self.conn
            if process is None or conn is None:  # a restart failed: try again a little later
                time.sleep(1.0)
                self._respawn()
                continue
            if not process.is_alive():
                self._restart(process, "died while idle")
                continue
            batch = self._take()
            if not batch:
                continue
            now = time.monotonic()
            for request, _ in batch:
                request.stages[stage.name].batched = now
            try:
                conn.send(("run", [payload for _, payload in batch]))
                reply = self._reply(process, conn)
            except (BrokenPipeError, OSError):
                reply = None
            requests = [request for request, _ in batch]
            del batch
            if reply is None:
                if closing.is_set():
                    for request in requests:
                        server.fail(request, stage.name, "the pipeline was closed")
                    return
                why = "died while running a batch"
                for request in requests:
                    server.fail(request, stage.name, f"replica {self.index} {why}")
                self._restart(process, why)
                continue
            _, outputs, started, finished = reply
            stage.record_batch(self.index, started, finished, len(requests))
            for request, output in zip(requests, outputs, strict=True):
                times = request.stages[stage.name]
                times.started, times.finished = started, finished
                times.batch_size, times.replica = len(requests), self.index
                if isinstance(output, Failure):
                    server.fail(request, stage.name, output.message)
                else:
                    server.forward(stage.position, request, output)
            del outputs, reply
