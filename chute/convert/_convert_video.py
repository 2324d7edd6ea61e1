"""`chute convert video FILE.csv DST`: container bytes stored as they are (never re-encoded),
with the probed columns a clip reader needs (docs/design.md, "Field kinds")."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from chute.convert._jobs import REPORT_NAME, ConvertJob, run_job
from chute.convert._sources import read_csv_rows
from chute.convert._video_probe import UnreadableVideo, probe_video
from chute.errors import ChuteError
from chute.readers.storage import beside, destination, read_regular_file

__all__ = ["VideoConvertReport", "VideoJob", "convert_video_csv", "VIDEO_FIELDS"]

# What a video dataset holds: the container, its probed columns, every frame's timestamp (for
# frame-accurate seeking), keyframe indices, the CSV's text + other columns as metadata, and
# its text (caption) column once more as a field of its own.
VIDEO_FIELDS: dict[str, str | dict] = {
    "video": {"kind": "bytes", "media": "video"},
    "num_frames": "int64", "fps": "float64", "height": "int32", "width": "int32",
    "duration": "float64", "rotation": "int16", "time_base": "float64",
    "pts": {"kind": "ndarray", "ragged": True, "dtype": "int64", "shape": [None]},
    "keyframes": {"kind": "ndarray", "ragged": True, "dtype": "int64", "shape": [None]},
    "meta": "json",
    # the CSV's caption column on its own (batch["text"]: a list of str; None without one)
    "text": "json",
}


@dataclass
class VideoConvertReport:
    written: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    report_path: Path | str | None = None


def _load(job: tuple[Path, str]):
    path, key = job
    try:
        data = read_regular_file(path)
    except OSError as exc:
        return None, f"cannot read the file: {exc.strerror or exc}"
    try:
        return (data, probe_video(data)), None
    except UnreadableVideo as exc:
        return None, str(exc)


def convert_video_csv(csv_path, dst, *, root=None, shard_size="1GiB", workers: int | None = None,
                      strict: bool = False, overwrite: bool = False, progress: bool = True,
                      report: Path | None = None, engine=None) -> VideoConvertReport:
    """Store the videos listed in a CSV (`path` relative to `root`, default the CSV's folder;
    `text` and any other columns go to metadata) as a chute dataset.

    Args:
        csv_path: the CSV file (header row with at least `path`).
        dst: the new dataset folder.
        root: folder the paths are relative to (default: the CSV's folder).
        shard_size: payload bytes per shard.
        workers: probing threads (default: CPU count).
        strict: fail on the first unreadable video instead of skipping it.
        overwrite: replace an existing chute dataset at `dst`.
        progress: show a progress bar.
        report: where skipped files are listed (default DST/skipped.tsv).
        engine: where to run it (None: this process; `chute.ray.RayEngine`: slices of the
            rows as tasks).
    """
    job = VideoJob(csv_path, root=root, shard_size=shard_size, strict=strict,
                   overwrite=overwrite, progress=progress, report=report)
    done = run_job(job, dst, engine=engine, workers=workers)
    return VideoConvertReport(written=done.written, skipped=done.skipped,
                              report_path=done.report_path or beside(destination(dst),
                                                                     REPORT_NAME))


class VideoJob(ConvertJob):
    """The rows of a video CSV as units (container bytes stored, probed columns computed).

    Args:
        csv_path: the CSV file.
        root: folder the paths are relative to (default: the CSV's folder).
        shard_size, strict, overwrite, progress, report: as `convert_video_csv` takes them.
    """

    kind = "video"
    unit = "video"

    def __init__(self, csv_path, *, root=None, shard_size="1GiB", strict: bool = False,
                 overwrite: bool = False, progress: bool = True, report: Path | None = None):
        self.csv_path = Path(csv_path)
        self.base = Path(root) if root is not None else self.csv_path.parent
        self.units, _ = read_csv_rows(self.csv_path)
        self.fields = VIDEO_FIELDS
        self.info = {"csv": str(self.csv_path.resolve())}
        self.strict = strict
        self.shard_size, self.overwrite = shard_size, overwrite
        self.progress, self.report = progress, report

    def write(self, units, writer, report, progress, workers) -> None:
        jobs = [(self.base / row["path"], row["path"]) for row in units]
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            for row, (loaded, problem) in zip(units, pool.map(_load, jobs), strict=True):
                progress(1)
                if loaded is None:
                    if self.strict:
                        raise ChuteError(f"{self.base / row['path']}: {problem} (--strict)")
                    report.skipped.append((row["path"], problem))
                    continue
                data, info = loaded
                meta = {"key": row["path"], **{k: v for k, v in row.items()
                                               if k not in ("path",) and k is not None}}
                writer.write({"video": data, "num_frames": info.num_frames, "fps": info.fps,
                              "height": info.height, "width": info.width,
                              "duration": info.duration, "rotation": info.rotation,
                              "time_base": info.time_base, "pts": info.pts,
                              "keyframes": info.keyframes, "meta": meta,
                              "text": row.get("text")})

    def check(self, report) -> None:
        if report.written == 0:
            raise ChuteError(f"{self.csv_path}: none of its {len(self.units)} videos could be "
                             "stored (first problem: "
                             f"{report.skipped[0][1] if report.skipped else '-'}); check the "
                             "paths (relative to the CSV's folder or --root)")

    def source_info(self, report) -> dict:
        return {"kind": self.kind, **self.info, "skipped": len(report.skipped)}
