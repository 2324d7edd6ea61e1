"""`RayEngine`: a convert's units cut into slices, each written by one Ray task as a part of the
dataset (its own shards, named for that attempt), adopted in order by the writer on the driver,
which alone writes the manifest (docs/ray.md)."""

from __future__ import annotations

import math
import os
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from chute.convert import ConvertReport, PartTarget, PartWriter
from chute.errors import ChuteError
from chute.ray._runtime import cluster_cpus, connect, task_env
from chute.ray._signals import HeldSignals
from chute.readers import StorageError

__all__ = ["RayEngine"]

# Test hook (tests/ray/): a folder; the first attempt of every task writes half its slice,
# then its process exits, as a preempted node would.
_KILL_FIRST_ATTEMPT = "CHUTE_TEST_RAY_KILL_FIRST_ATTEMPT"
_CANCEL_WAIT_S = 60  # how long a failed convert waits for its cancelled tasks to stop
_CHECK_EVERY_S = 5  # how often the driver checks its write can still commit
_POLL_S = 0.2  # how often it looks for a SIGINT or SIGTERM held meanwhile


@dataclass(frozen=True)
class RayEngine:
    """Run converts as Ray tasks (`chute convert ... --engine ray`).

    Args:
        address: the Ray cluster ("auto", "ray://HOST:PORT"); None starts a local instance.
        task_size: units (image files, tars, video or audio rows, samples) per task; None:
            the units split into four tasks per CPU of the cluster. Every task ends its last
            shard early, so a task should hold several shards' worth of input.
        retries: how often a task that failed (its process died, or an I/O error) is run
            again before the convert fails.
    """

    address: str | None = None
    task_size: int | None = None
    retries: int = 3

    def start(self) -> None:
        """Join the cluster (or start a local instance) before anything is written; a SIGINT
        or SIGTERM meanwhile waits for Ray to be up, then shuts it down (KeyboardInterrupt)."""
        with HeldSignals() as held:
            try:
                ray = connect(self.address)
            except SystemExit:  # ray.init's own SIGTERM handler, while it starts Ray
                held.received = signal.SIGTERM
                ray = sys.modules["ray"]
            if held.received is not None:
                ray.shutdown()
        held.check()

    def run(self, job, writer, report: ConvertReport, progress) -> None:
        """Write `job`'s units as parts adopted by `writer` (see `chute.convert.Engine`). A
        SIGINT or SIGTERM cancels the tasks, waits for them, shuts Ray down and raises
        KeyboardInterrupt (the writer then drops what they wrote)."""
        ray = connect(self.address)
        # a signal is held while Ray calls run, and acted on between them (docs/ray.md)
        with HeldSignals() as held:
            try:
                done = self._run_tasks(ray, job, writer, progress, held)
            except KeyboardInterrupt:
                ray.shutdown()  # no Ray process outlives an interrupted convert
                raise
        for part in done:
            writer.adopt(part["part"])
            report.merge(ConvertReport(actions=Counter(part["actions"]),
                                       skipped=list(part["skipped"])))

    def _run_tasks(self, ray: Any, job, writer, progress, held: HeldSignals) -> list[dict]:
        """The results of the tasks, in slice order."""
        units = len(job.units)
        cpus = cluster_cpus(ray)
        if cpus == 0:
            raise ChuteError("the Ray cluster has no CPU to run tasks on (a head started with "
                             "--num-cpus 0 and no worker nodes?); add a node with CPUs")
        size = self.task_size or max(1, math.ceil(units / (4 * cpus)))
        slices = [(i, start, min(start + size, units))
                  for i, start in enumerate(range(0, units, size))]
        # Ray core tasks (what Ray Data runs on): their retries can be bounded, where Ray Data
        # reruns a dying task without end (docs/ray.md)
        task = ray.remote(_write_slice).options(
            num_cpus=1, max_retries=self.retries, retry_exceptions=[OSError, StorageError],
            **task_env())
        job_ref, target = ray.put(job), writer.part_target()
        kill_first = os.environ.get(_KILL_FIRST_ATTEMPT)
        pending: dict[Any, int] = {}
        done: dict[int, dict] = {}
        failed: dict[int, str] = {}  # task -> its one-line error
        waiting = iter(slices)
        checked = time.monotonic()
        try:
            while len(done) + len(failed) < len(slices):
                held.check()
                while not failed and len(pending) < 2 * cpus:  # the rest wait here
                    item = next(waiting, None)
                    if item is None:
                        break
                    pending[task.remote(job_ref, target, *item, kill_first)] = item[0]
                first_failed = min(failed, default=len(slices))
                if not any(i < first_failed for i in pending.values()):
                    break  # a failure, and every slice before it is done
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
                if time.monotonic() - checked >= _CHECK_EVERY_S:
                    writer.check()  # e.g. an s3 lease lost meanwhile: stop now, not at the end
                    checked = time.monotonic()
                if not ready:
                    continue
                index = pending.pop(ready[0])
                try:
                    result = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    failed[index] = (f"{job.kind} convert on Ray: task {index} (inputs "
                                     f"{slices[index][1]}-{slices[index][2] - 1}) failed: "
                                     f"{_first_line(exc)} (a task whose process died or "
                                     f"that hit an I/O error runs {self.retries + 1} times)")
                    continue
                if result["error"]:  # deterministic (--strict, a bad source): not retried
                    failed[index] = result["error"]
                    continue
                done[index] = result
                progress(result["units"])
            held.check()
            if failed:  # the first in input order, as --engine local would stop at it
                raise ChuteError(failed[min(failed)])
        finally:
            if pending:  # stop writing into a dataset that is being dropped, before it goes
                for ref in pending:
                    ray.cancel(ref, force=True)
                ray.wait(list(pending), num_returns=len(pending), timeout=_CANCEL_WAIT_S)
        return [done[i] for i in range(len(slices))]


def _write_slice(job: Any, target: PartTarget, task: int, start: int, stop: int,
                 kill_first: str | None) -> dict[str, Any]:
    """One task: the units [start, stop) of `job`, written by a PartWriter."""
    result: dict[str, Any] = {"task": task, "units": stop - start, "error": ""}
    if not target.remote and not os.path.isdir(target.location):
        return {**result, "error": f"{target.location}: the destination's staging folder is not "
                f"on the node that ran task {task} ({socket.gethostname()}); write to s3://, "
                "gs://, az:// or a shared file system every node mounts (docs/ray.md)"}
    units = job.units[start:stop]
    writer = PartWriter(target)
    report = ConvertReport()
    try:
        if kill_first and _first_attempt(kill_first, task):
            job.write(units[:max(1, len(units) // 2)], writer, report, _ignore, 1)
            os._exit(1)
        job.write(units, writer, report, _ignore, 1)
        writer.close()
    except StorageError:  # transient (the endpoint away too long): Ray runs the task again
        writer.abort()
        raise
    except ChuteError as exc:
        writer.abort()
        return {**result, "error": str(exc)}
    except BaseException:
        writer.abort()
        raise
    return {**result, "part": writer.part, "actions": dict(report.actions),
            "skipped": report.skipped}


def _first_attempt(folder: str, task: int) -> bool:
    try:
        with open(os.path.join(folder, f"task-{task}"), "x"):
            return True
    except FileExistsError:
        return False


def _ignore(_: int) -> None:
    return None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):  # the cause is last in Ray's traceback text
        if ":" in line and not line.startswith(" "):
            return line.strip()
    return lines[-1].strip() if lines else type(exc).__name__
