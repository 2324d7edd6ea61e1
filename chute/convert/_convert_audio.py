"""`convert_audio`: recordings -> a chute dataset. Each file's bytes are stored once as they are
(never re-encoded) in a bytes field of media "audio", with probed scalar columns and the
segments in decoupled JSON metadata, so `chute meta update` can change transcripts and segment
lists without touching audio (docs/design.md, "Audio")."""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass, field
from pathlib import Path

from chute.convert._audio_kaldi import is_kaldi_folder, list_kaldi
from chute.convert._audio_lhotse import lhotse_kind, list_lhotse
from chute.convert._audio_sources import (
    AudioSource,
    Probed,
    list_audio_csv,
    list_audio_jsonl,
    probe_audio,
)
from chute.convert._jobs import ConvertJob, run_job
from chute.errors import ChuteError

__all__ = ["AudioConvertOptions", "AudioConvertReport", "AudioJob", "convert_audio",
           "list_recordings", "AUDIO_FIELDS"]

AUDIO_FIELDS: dict[str, str | dict] = {
    "audio": {"kind": "bytes", "media": "audio"}, "sample_rate": "int32", "channels": "int32",
    "num_frames": "int64", "duration": "float64", "meta": "json"}


@dataclass(frozen=True)
class AudioConvertOptions:
    shard_size: str | int = "1GiB"
    workers: int | None = None  # probe processes; None = one per CPU
    strict: bool = False  # fail on the first bad file or segment instead of skipping it
    overwrite: bool = False
    progress: bool = True
    report: Path | None = None  # default DST/skipped.tsv
    root: Path | None = None  # folder the listed paths are relative to (Kaldi, lhotse: the cwd)
    supervisions: Path | None = None  # a lhotse supervisions manifest (with its recordings)


@dataclass
class AudioConvertReport:
    written: int = 0
    segments: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path or path#i, reason)
    dropped_segments: int = 0
    report_path: Path | str | None = None


def _probed(sources, workers: int | None):
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(sources) < 2:
        yield from map(probe_audio, sources)
        return
    # spawn: forking a process that already runs thread pools (numba, torch) is unsafe
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(probe_audio, sources, chunksize=4)


def _sample(source: AudioSource, probed: Probed) -> dict:
    meta = {"key": source.key, "txt": source.txt, "segments": probed.segments, **source.info}
    return {"audio": probed.data, "sample_rate": probed.sample_rate,
            "channels": probed.channels, "num_frames": probed.num_frames,
            "duration": probed.num_frames / probed.sample_rate, "meta": meta}


def _named(source: AudioSource, index: int) -> str:
    """" (its key)" for a listed segment that has its own key (an utterance id), else ""."""
    seg = source.segments[index] if isinstance(source.segments, list) else None
    return f" ({seg['key']})" if isinstance(seg, dict) and "key" in seg else ""


def _refuse(options: AudioConvertOptions, where: str, reason: str) -> None:
    if options.strict:
        raise ChuteError(f"{where}: {reason}; fix it, or convert without --strict to skip it")


def list_recordings(src, root=None, supervisions=None) -> list[AudioSource]:
    """The recordings `src` lists: a Kaldi data folder (or its wav.scp), a lhotse recordings
    manifest (with `supervisions`) or cuts manifest, a `.csv` of path,text, or JSONL metainfo
    (also a WeNet data.list); one source per file.

    Args:
        src: the listing.
        root: the folder its paths are relative to.
        supervisions: a lhotse supervisions manifest for a recordings manifest `src`.
    """
    src = Path(src)
    if src.is_file() and lhotse_kind(src) is not None:
        return list_lhotse(src, supervisions, root)
    if supervisions is not None:
        raise ChuteError(f"{src}: not a lhotse recordings manifest; supervisions ("
                         f"{supervisions}) go with one")
    if is_kaldi_folder(src) or src.name == "wav.scp":
        return list_kaldi(src, root)
    if src.is_dir():
        raise ChuteError(f"{src}: a folder without wav.scp; pass a Kaldi data folder, a JSONL "
                         "file of recordings or a CSV of path,text")
    if src.suffix.lower() == ".csv":
        return list_audio_csv(src, root)
    return list_audio_jsonl(src, root)


def convert_audio(src, dst, options: AudioConvertOptions = AudioConvertOptions(), *,
                  engine=None) -> AudioConvertReport:
    """Convert the recordings listed in `src`: `.jsonl` metainfo (or a WeNet data.list),
    a `.csv` with path,text, a Kaldi data folder (wav.scp, segments, text, utt2spk) or a
    lhotse recordings (with `options.supervisions`) or cuts manifest.

    Args:
        src: the list of recordings.
        dst: the new dataset folder.
        options: shard size, workers, strictness, report location, path root.
        engine: where to run it (None: this process; `chute.ray.RayEngine`: slices of the
            recordings as tasks).
    """
    job = AudioJob(src, options)
    done = run_job(job, dst, engine=engine, workers=options.workers)
    dropped = done.actions["dropped_segments"]
    return AudioConvertReport(written=done.written, segments=done.actions["segments"],
                              skipped=done.skipped, dropped_segments=dropped,
                              report_path=done.report_path)


class AudioJob(ConvertJob):
    """The recordings of a listing as units (bytes stored, probed columns, segments).

    Args:
        src: the listing (see `convert_audio`).
        options: the convert options.
    """

    kind = "audio"
    unit = "file"
    fields = AUDIO_FIELDS

    def __init__(self, src, options: AudioConvertOptions):
        self.src, self.options = Path(src), options
        self.units = list_recordings(self.src, options.root, options.supervisions)
        self.take_options(options)

    def write(self, units, writer, report, progress, workers) -> None:
        results = _probed(units, workers)
        try:
            for source, probed in zip(units, results, strict=True):
                progress(1)
                if isinstance(probed, str):
                    _refuse(self.options, str(source.path), probed)
                    report.skipped.append((str(source.path), probed))
                    continue
                for index, reason in probed.dropped:
                    where = f"{source.path}#segment{index}{_named(source, index)}"
                    _refuse(self.options, where, reason)
                    report.skipped.append((where, reason))
                report.actions["dropped_segments"] += len(probed.dropped)
                report.actions["segments"] += len(probed.segments)
                writer.write(_sample(source, probed))
        finally:
            results.close()

    def check(self, report) -> None:
        # as for images and videos: a dataset of no recording is refused, not committed empty
        if report.written == 0:
            first = (f"{report.skipped[0][0]}: {report.skipped[0][1]}" if report.skipped
                     else "the listing names none")
            raise ChuteError(f"{self.src}: none of its {len(self.units)} recordings could be "
                             f"stored (first problem: {first}); check the listed files and "
                             "--root (what relative paths are relative to)")

    def source_info(self, report) -> dict:
        dropped = report.actions["dropped_segments"]
        return {"kind": "audio", "file": str(self.src.resolve()),
                "segments": report.actions["segments"],
                "skipped": len(report.skipped) - dropped, "dropped_segments": dropped}
