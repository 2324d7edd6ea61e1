"""Converting image sources to a chute dataset, with a process pool and a progress bar."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from chute.errors import ChuteError
from chute.readers.convert._images import UnreadableImage, prepare_image
from chute.readers.convert._sources import Source, list_csv, list_imagefolder
from chute.readers.convert._transcode import TRANSCODE_QUALITY
from chute.readers.format._writer import ShardWriter
from chute.readers.storage._files import read_regular_file, write_skipped
from chute.readers.storage._storage import beside, destination, name_of

__all__ = ["ConvertOptions", "ConvertReport", "convert_sources", "convert_imagefolder",
           "convert_csv", "REPORT_NAME"]

REPORT_NAME = "skipped.tsv"


@dataclass(frozen=True)
class ConvertOptions:
    shard_size: str | int = "1GiB"
    workers: int | None = None  # processes; None = one per CPU
    max_side: int | None = None  # downscale (and re-encode) images larger than this
    quality: int = TRANSCODE_QUALITY  # JPEG quality of transcoded / downscaled images
    strict: bool = False  # fail on the first unreadable image instead of skipping it
    overwrite: bool = False
    progress: bool = True
    report: Path | None = None  # where skipped files are listed (default DST/skipped.tsv)


@dataclass
class ConvertReport:
    written: int = 0
    actions: Counter = field(default_factory=Counter)  # stored / transcoded / resized
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    report_path: Path | str | None = None


def _prepare(job: tuple[Source, int | None, int]):
    source, max_side, quality = job
    try:
        raw = read_regular_file(source.path)
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"
    try:
        return prepare_image(raw, max_side=max_side, quality=quality)
    except UnreadableImage as exc:
        return str(exc)


def _results(sources: list[Source], options: ConvertOptions):
    jobs = ((s, options.max_side, options.quality) for s in sources)
    workers = options.workers or os.cpu_count() or 1
    if workers <= 1 or len(sources) < 2:
        yield from map(_prepare, jobs)
        return
    # spawn: forking a process that already runs thread pools (numba, torch) is unsafe
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(_prepare, jobs, chunksize=8)


def _write_all(writer: ShardWriter, sources: list[Source], results, with_label: bool,
               options: ConvertOptions, report: ConvertReport, bar) -> None:
    for source, result in zip(sources, results, strict=True):
        bar.update()
        if isinstance(result, str):
            if options.strict:
                raise ChuteError(f"{source.path}: {result}; fix or remove the file, or "
                                 "convert without --strict to skip it")
            report.skipped.append((str(source.path), result))
            continue
        sample = {"image": result.data, "height": result.height, "width": result.width,
                  "meta": {"key": source.key, **source.meta}}
        if with_label:
            sample["label"] = source.label
        writer.write(sample)
        report.actions[result.action] += 1


def convert_sources(sources: list[Source], dst, *, class_names: list[str] | None,
                    source_info: dict, options: ConvertOptions) -> ConvertReport:
    """Write `sources` as a dataset with fields image, height, width, meta (+ label)."""
    dst = destination(dst)  # a folder, or s3://... (uploaded shard by shard)
    fields: dict[str, str | dict] = {"image": {"kind": "bytes", "media": "image"},
                                     "height": "int32", "width": "int32", "meta": "json"}
    with_label = any(s.label is not None for s in sources)
    if with_label:
        fields["label"] = "int64"
    report = ConvertReport()
    with ShardWriter(dst, fields, shard_size=options.shard_size, class_names=class_names,
                     overwrite=options.overwrite) as writer:
        bar = tqdm(total=len(sources), unit="img", disable=not options.progress,
                   desc=f"convert -> {name_of(dst)}")
        results = _results(sources, options)
        try:
            _write_all(writer, sources, results, with_label, options, report, bar)
        finally:
            results.close()  # stops the worker pool also when a --strict error aborts
            bar.close()
        report.written = len(writer)
        writer.manifest_extra["source"] = {**source_info, **report.actions,
                                           "skipped": len(report.skipped)}
    if report.skipped:
        report.report_path = options.report or beside(dst, REPORT_NAME)
        write_skipped(report.report_path, report.skipped)
    return report


def convert_imagefolder(src, dst, options: ConvertOptions = ConvertOptions()) -> ConvertReport:
    """ROOT/<class>/<image> -> dataset with label (sorted class index) and class_names; a flat
    ROOT/<image> folder -> a dataset without labels."""
    sources, class_names = list_imagefolder(src)
    info = {"kind": "imagefolder", "root": str(Path(src).resolve())}
    return convert_sources(sources, dst, class_names=class_names or None, source_info=info,
                           options=options)


def convert_csv(csv_path, dst, options: ConvertOptions = ConvertOptions(),
                root=None) -> ConvertReport:
    """CSV with `path`, optional `label`, other columns -> metadata."""
    sources, class_names = list_csv(csv_path, root)
    info = {"kind": "csv", "file": str(Path(csv_path).resolve())}
    return convert_sources(sources, dst, class_names=class_names, source_info=info,
                           options=options)
