"""`chute convert video FILE.csv DST`: container bytes stored as they are (never re-encoded),
with the probed columns a clip reader needs (docs/design.md, "Field kinds")."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from chute.errors import ChuteError
from chute.readers.convert._sources import read_csv_rows
from chute.readers.convert._video_probe import UnreadableVideo, probe_video
from chute.readers.format._writer import ShardWriter
from chute.readers.storage._files import read_regular_file, write_skipped
from chute.readers.storage._storage import beside, destination

__all__ = ["VideoConvertReport", "convert_video_csv", "VIDEO_FIELDS"]

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
                      report: Path | None = None) -> VideoConvertReport:
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
    """
    csv_path = Path(csv_path)
    base = Path(root) if root is not None else csv_path.parent
    rows, _ = read_csv_rows(csv_path)
    result = VideoConvertReport()
    jobs = [(base / row["path"], row["path"]) for row in rows]
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1)
    with ShardWriter(dst, VIDEO_FIELDS, shard_size=shard_size, overwrite=overwrite) as writer, \
            pool:
        for row, (loaded, problem) in tqdm(zip(rows, pool.map(_load, jobs), strict=True),
                                           total=len(rows), disable=not progress,
                                           desc="convert video", unit="video"):
            if loaded is None:
                if strict:
                    raise ChuteError(f"{base / row['path']}: {problem} (--strict)")
                result.skipped.append((row["path"], problem))
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
            result.written += 1
        if result.written == 0:
            raise ChuteError(f"{csv_path}: none of its {len(rows)} videos could be stored "
                             f"(first problem: {result.skipped[0][1] if result.skipped else '-'})"
                             "; check the paths (relative to the CSV's folder or --root)")
    result.report_path = report or beside(destination(dst), "skipped.tsv")
    if result.skipped:
        write_skipped(result.report_path, result.skipped)
    return result
