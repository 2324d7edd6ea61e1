"""A convert as a job: its work units in output order (image files, tar shards, CSV rows) and
how one run of them writes samples. Every converter builds one; `run_job` runs it in this
process, or hands it to an engine that runs slices of the units elsewhere (`chute.ray`), each
slice written as a part of the same dataset and adopted in order (docs/ray.md)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chute.convert._writer import ShardWriter
from chute.readers.storage import beside, destination, name_of, write_skipped

__all__ = ["ConvertJob", "ConvertReport", "Engine", "run_job", "REPORT_NAME"]

REPORT_NAME = "skipped.tsv"


@dataclass
class ConvertReport:
    written: int = 0
    actions: Counter = field(default_factory=Counter)  # stored / transcoded / resized
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    report_path: Path | str | None = None

    def merge(self, other: ConvertReport) -> None:
        """Add the counts and skips of a later slice of the same job."""
        self.actions.update(other.actions)
        self.skipped.extend(other.skipped)


class ConvertJob(ABC):
    """What a converter does, split into units that can be written in slices.

    Attributes:
        kind: the source kind ("imagefolder", "webdataset", ...), in the manifest's "source".
        units: picklable work units, in the order their samples are stored.
        fields: the dataset's field declarations (the same for every slice).
        class_names: label names for the manifest.
        info: what the manifest's "source" records about the input.
        unit: the name of one unit in progress displays.
        tables: arrays stored once for the whole dataset (written by the committing writer).
        extra: more keys for the manifest.
        shard_size, overwrite, strict, progress, report: as every converter takes them.
    """

    kind: str
    units: Sequence[Any]
    fields: dict[str, Any]
    class_names: list[str] | None = None
    info: dict[str, Any]
    unit: str = "file"
    shard_size: str | int = "1GiB"
    overwrite: bool = False
    progress: bool = True
    report: Path | str | None = None
    tables: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None

    @abstractmethod
    def write(self, units: Sequence[Any], writer: ShardWriter, report: ConvertReport,
              progress: Callable[[int], Any], workers: int | None) -> None:
        """Write the samples of `units` (a slice of `self.units`, in order) with `writer`,
        counting skips in `report` and calling `progress(n)` as units are done.

        Args:
            units: the slice to write.
            writer: a ShardWriter (the dataset's, or one part's).
            report: where actions and skipped inputs are counted.
            progress: called with the number of units just done.
            workers: processes or threads this slice may use (None: one per CPU).
        """

    def take_options(self, options: Any) -> None:
        """shard_size, overwrite, progress and report from a converter's options dataclass."""
        self.shard_size, self.overwrite = options.shard_size, options.overwrite
        self.progress, self.report = options.progress, options.report

    def check(self, report: ConvertReport) -> None:
        """Called before the dataset is committed: raise to refuse the result (e.g. nothing
        could be stored)."""
        return None

    def source_info(self, report: ConvertReport) -> Any:
        """The manifest's "source" entry."""
        return {"kind": self.kind, **self.info, **report.actions, "skipped": len(report.skipped)}


class Engine(Protocol):
    """Runs the units of a job in slices, each through `PartWriter(writer.part_target())`,
    adopting the parts into `writer` in order and merging their reports. `start` is called
    first, before anything is written (connect, or fail in one line)."""

    def start(self) -> None: ...

    def run(self, job: ConvertJob, writer: ShardWriter, report: ConvertReport,
            progress: Callable[[int], Any]) -> None: ...


def run_job(job: ConvertJob, dst, *, engine: Engine | None = None,
            workers: int | None = None) -> ConvertReport:
    """Run `job` into the dataset `dst` (a folder or s3://...): in this process with `workers`
    processes or threads, or on `engine`. The manifest is written only when every unit is done;
    skipped inputs are listed in `job.report` (default DST/skipped.tsv).

    Args:
        job: the convert.
        dst: the new dataset.
        engine: where to run it (None: this process).
        workers: processes or threads of this process (None: one per CPU).
    """
    from tqdm import tqdm

    dst = destination(dst)
    report = ConvertReport()
    if engine is not None:
        engine.start()
    with ShardWriter(dst, job.fields, shard_size=job.shard_size, class_names=job.class_names,
                     overwrite=job.overwrite, tables=job.tables,
                     manifest_extra=job.extra) as writer:
        bar = tqdm(total=len(job.units), unit=job.unit, disable=not job.progress,
                   desc=f"convert -> {name_of(dst)}")
        try:
            if engine is None:
                job.write(job.units, writer, report, bar.update, workers)
            else:
                engine.run(job, writer, report, bar.update)
        finally:
            bar.close()
        report.written = len(writer)
        job.check(report)
        writer.manifest_extra["source"] = job.source_info(report)
    if report.skipped:
        report.report_path = job.report or beside(dst, REPORT_NAME)
        write_skipped(report.report_path, report.skipped)
    return report
