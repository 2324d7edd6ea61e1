"""`RayEngine`: a convert's units cut into slices, each written by one Ray Data task as a part
of the dataset (its own shards, named for that attempt), adopted in order by the writer on the
driver, which alone writes the manifest (docs/ray.md)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from chute.errors import ChuteError
from chute.ray._runtime import cluster_cpus, connect, task_env
from chute.readers import ConvertReport, PartTarget, PartWriter, StorageError

__all__ = ["RayEngine"]

# Test hook (tests/ray/): a folder; the first attempt of every task writes half its slice,
# then its process exits, as a preempted node would.
_KILL_FIRST_ATTEMPT = "CHUTE_TEST_RAY_KILL_FIRST_ATTEMPT"


@dataclass(frozen=True)
class RayEngine:
    """Run converts as Ray Data tasks (`chute convert ... --engine ray`).

    Args:
        address: the Ray cluster ("auto", "ray://HOST:PORT"); None starts a local instance.
        task_size: units (images, tars, videos) per task; None: the units split into four
            tasks per CPU of the cluster. Every task ends its last shard early, so a task
            should hold several shards' worth of input.
        retries: how often a task that failed (its process died, or an I/O error) is run
            again before the convert fails.
    """

    address: str | None = None
    task_size: int | None = None
    retries: int = 3

    def run(self, job, writer, report: ConvertReport, progress) -> None:
        """Write `job`'s units as parts adopted by `writer` (see `chute.readers.Engine`)."""
        ray = connect(self.address)  # with ray.data imported
        units = len(job.units)
        size = self.task_size or max(1, math.ceil(units / (4 * cluster_cpus(ray))))
        slices = [{"task": i, "start": start, "stop": min(start + size, units)}
                  for i, start in enumerate(range(0, units, size))]
        if not slices:
            return
        task = _WriteSlice(ray.put(job), writer.part_target(),
                           os.environ.get(_KILL_FIRST_ATTEMPT))
        tasks = ray.data.from_items(slices, override_num_blocks=len(slices)).map(
            task, num_cpus=1, ray_remote_args_fn=_Retries(self.retries))
        done: dict[int, dict] = {}
        try:
            for row in tasks.iter_rows():
                if row["error"]:  # deterministic (--strict, a bad source): not retried
                    raise ChuteError(row["error"])
                done[row["task"]] = row
                progress(row["stop"] - row["start"])
        except ray.exceptions.RayError as exc:
            raise ChuteError(f"{job.kind} convert on Ray: a task failed {self.retries + 1} "
                             f"times: {_first_line(exc)}") from None
        for i in range(len(slices)):
            row = done[i]
            writer.adopt(json.loads(row["part"]))
            report.merge(ConvertReport(actions=Counter(json.loads(row["actions"])),
                                       skipped=[tuple(s) for s in json.loads(row["skipped"])]))


class _WriteSlice:
    """One task: the units [start, stop) of the job, written by a PartWriter."""

    def __init__(self, job_ref: Any, target: PartTarget, kill_first: str | None):
        self.job_ref, self.target, self.kill_first = job_ref, target, kill_first

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        import ray

        job = ray.get(self.job_ref)
        units = job.units[row["start"]:row["stop"]]
        writer = PartWriter(self.target)
        report = ConvertReport()
        result = {**row, "error": "", "part": "", "actions": "{}", "skipped": "[]"}
        try:
            if self.kill_first and _first_attempt(self.kill_first, row["task"]):
                job.write(units[:max(1, len(units) // 2)], writer, report, _ignore, 1)
                os._exit(1)
            job.write(units, writer, report, _ignore, 1)
            writer.close()
        except ChuteError as exc:
            writer.abort()
            return {**result, "error": str(exc)}
        except BaseException:
            writer.abort()
            raise
        return {**result, "part": json.dumps(writer.part),
                "actions": json.dumps(dict(report.actions)),
                "skipped": json.dumps(report.skipped)}


class _Retries:
    """Remote options of every task: a task whose process died, or that raised an I/O error,
    runs again up to `retries` times (Ray Data alone would rerun a dying task forever)."""

    def __init__(self, retries: int):
        self.retries = retries

    def __call__(self) -> dict[str, Any]:
        return {"max_retries": self.retries, "retry_exceptions": [OSError, StorageError],
                **task_env()}


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
