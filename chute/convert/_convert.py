"""Converting image sources to a chute dataset, with a process pool (or an engine: docs/ray.md)
and a progress bar."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chute.convert._images import UnreadableImage, prepare_image
from chute.convert._jobs import REPORT_NAME, ConvertJob, ConvertReport, Engine, run_job
from chute.convert._sources import Source, list_csv, list_imagefolder
from chute.convert._transcode import TRANSCODE_QUALITY
from chute.convert._writer import ShardWriter
from chute.errors import ChuteError
from chute.readers.storage import read_regular_file

__all__ = ["ConvertOptions", "ConvertReport", "ImageJob", "convert_sources",
           "convert_imagefolder", "convert_csv", "REPORT_NAME"]


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


def _results(sources: Sequence[Source], options: ConvertOptions, workers: int | None):
    jobs = ((s, options.max_side, options.quality) for s in sources)
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(sources) < 2:
        yield from map(_prepare, jobs)
        return
    # spawn: forking a process that already runs thread pools (numba, torch) is unsafe
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(_prepare, jobs, chunksize=8)


def _write_all(writer: ShardWriter, sources: Sequence[Source], results, with_label: bool,
               options: ConvertOptions, report: ConvertReport, progress) -> None:
    for source, result in zip(sources, results, strict=True):
        progress(1)
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


class ImageJob(ConvertJob):
    """Image files -> fields image, height, width, meta (+ label).

    Args:
        sources: the images, in order.
        class_names: label names (None: none).
        info: the manifest's "source" entry (kind and input).
        options: the convert options.
    """

    unit = "img"

    def __init__(self, sources: list[Source], class_names: list[str] | None, info: dict,
                 options: ConvertOptions):
        self.kind = info["kind"]
        self.units = sources
        self.info = {k: v for k, v in info.items() if k != "kind"}
        self.class_names = class_names
        self.with_label = any(s.label is not None for s in sources)
        self.fields = {"image": {"kind": "bytes", "media": "image"},
                       "height": "int32", "width": "int32", "meta": "json"}
        if self.with_label:
            self.fields["label"] = "int64"
        self.options = options
        self.take_options(options)

    def write(self, units, writer, report, progress, workers) -> None:
        results = _results(units, self.options, workers)
        try:
            _write_all(writer, units, results, self.with_label, self.options, report, progress)
        finally:
            results.close()  # stops the worker pool also when a --strict error aborts


def convert_sources(sources: list[Source], dst, *, class_names: list[str] | None,
                    source_info: dict, options: ConvertOptions,
                    engine: Engine | None = None) -> ConvertReport:
    """Write `sources` as a dataset with fields image, height, width, meta (+ label)."""
    job = ImageJob(sources, class_names, source_info, options)
    return run_job(job, dst, engine=engine, workers=options.workers)


def convert_imagefolder(src, dst, options: ConvertOptions = ConvertOptions(), *,
                        engine: Engine | None = None) -> ConvertReport:
    """ROOT/<class>/<image> -> dataset with label (sorted class index) and class_names; a flat
    ROOT/<image> folder -> a dataset without labels."""
    sources, class_names = list_imagefolder(src)
    info = {"kind": "imagefolder", "root": str(Path(src).resolve())}
    return convert_sources(sources, dst, class_names=class_names or None, source_info=info,
                           options=options, engine=engine)


def convert_csv(csv_path, dst, options: ConvertOptions = ConvertOptions(),
                root=None, *, engine: Engine | None = None) -> ConvertReport:
    """CSV with `path`, optional `label`, other columns -> metadata."""
    sources, class_names = list_csv(csv_path, root)
    info = {"kind": "csv", "file": str(Path(csv_path).resolve())}
    return convert_sources(sources, dst, class_names=class_names, source_info=info,
                           options=options, engine=engine)
