"""The parent's side of one replica: its process, and the thread that forms its batches from the
stage's queue (dynamic batching), sends them, routes the results, and restarts the process when
it dies (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from chute.errors import ChuteError
from chute.infer._cuda_ipc import on_cuda
from chute.infer._replica import Failure, replica_main

__all__ = ["ReplicaHandle", "StartupError", "REPLICA_NAME", "NO_MAIN_GUARD_EXIT",
           "HOLD_RESTART_ENV"]

log = logging.getLogger("chute.infer")
_POLL = 0.05


class StartupError(ChuteError):
    """A stage could not be built, or its replica process could not start.

    Attributes:
        remote_traceback: the replica's traceback of the error, when it raised one.
    """

    def __init__(self, message: str, remote_traceback: str | None = None):
        super().__init__(message)
        self.remote_traceback = remote_traceback


# Replica processes are named f"{REPLICA_NAME}{stage}-{index}"; a process of that name that
# reaches InferServer while it imports the parent's main script exits with NO_MAIN_GUARD_EXIT,
# which the parent reports as one line (docs/inference.md, "Scripts").
REPLICA_NAME = "chute-infer-"
NO_MAIN_GUARD_EXIT = 87

# Test hook (docs/testing.md): when this names a file, a replica restart creates it once the
# new process is spawned and then waits until the pipeline closes, so that a test interrupts
# the pipeline exactly in the middle of a restart.
HOLD_RESTART_ENV = "CHUTE_TEST_HOLD_RESTART"


def _spawn_blocking_sigint(process: BaseProcess) -> None:
    """Start `process` with SIGINT blocked: the child inherits the mask through exec, so a
    Ctrl-C while it starts waits until replica_main ignores SIGINT (and is then discarded)
    instead of killing it with a traceback half-way through its imports."""
    if not hasattr(signal, "pthread_sigmask"):
        process.start()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
        """Start the process (without waiting for it to be ready). `process` and `conn` are
        set together, and only once the process has started: a start that fails leaves
        nothing to stop."""
        ctx = multiprocessing.get_context("spawn")
        config = self.stage.config
        following = self.stage.server.config.stages[self.stage.position + 1:]
        send_cuda = bool(following) and on_cuda(following[0].devices)
        parent, child = ctx.Pipe()
        try:
            process = ctx.Process(
                target=replica_main, daemon=True, name=f"{REPLICA_NAME}{config.name}-{self.index}",
                args=(child, config.fn, config.options, self.stage.base,
                      config.device(self.index), self.stage.dataset, config.threads, send_cuda))
            _spawn_blocking_sigint(process)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        assert process.pid is not None  # started
        self.process, self.conn = process, parent
        self.pids.append(process.pid)

    def _started(self) -> tuple[BaseProcess, Connection]:
        """The process and the pipe to it (set by `spawn`)."""
        process, conn = self.process, self.conn
        assert process is not None and conn is not None, "the replica has no process"
        return process, conn

    def _exited(self, process: BaseProcess) -> StartupError:
        stage = self.stage
        if process.exitcode == NO_MAIN_GUARD_EXIT:
            import __main__

            script = getattr(__main__, "__file__", None) or "the main script"
            return StartupError(
                f"stage {stage.name!r}: its replica process ran {script} again and reached "
                "InferServer while starting (processes are spawned and import the main "
                "script): start the server under `if __name__ == \"__main__\":` (see "
                "docs/inference.md, Scripts)")
        return StartupError(f"replica {self.index} of stage {stage.name!r} exited while "
                            f"starting (exit code {process.exitcode}); its messages are above")

    def check_ready(self) -> bool:
        """True once the process has built its stage, False while it is still starting.

        Raises:
            StartupError: the stage could not be built or the process exited.
        """
        process, conn = self._started()
        if not conn.poll():
            if process.is_alive():
                return False
            process.join(1.0)  # reaped: its exit code is known
            if not conn.poll():  # (a message sent just before it exited is still read)
                raise self._exited(process)
        try:
            message = conn.recv()
        except (EOFError, OSError):
            process.join(1.0)
            raise self._exited(process) from None
        if message[0] == "error":
            _, summary, remote = message
            raise StartupError(f"stage {self.stage.name!r} (fn {self.stage.config.fn!r}) cannot "
                               f"be built: {summary}", remote)
        return True

    def await_ready(self, timeout: float) -> None:
        """Wait until the process has built its stage; raise StartupError if it cannot."""
        process, conn = self._started()
        deadline = time.monotonic() + timeout
        while not self.check_ready():
            if self.stage.server.closing.is_set():
                raise StartupError(f"the pipeline closed while replica {self.index} of stage "
                                   f"{self.stage.name!r} was starting")
            if time.monotonic() > deadline:
                raise StartupError(f"replica {self.index} of stage {self.stage.name!r} was not "
                                   f"ready after {timeout:.0f} s")
            wait([conn, process.sentinel], _POLL)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the process to exit, then make sure it has (idempotent)."""
        process, conn = self.process, self.conn
        self.process = self.conn = None
        if conn is not None:
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError, ValueError):
                pass
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.terminate()
                process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        if conn is not None:
            conn.close()

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
            hold = os.environ.get(HOLD_RESTART_ENV)
            if hold:
                Path(hold).touch()
                stage.server.closing.wait()
            self.await_ready(stage.server.startup_timeout)
        except Exception as exc:  # noqa: BLE001  (a failed start must not end this thread)
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
