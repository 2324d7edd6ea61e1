"""What `chute convert audio` reads: recordings listed in a JSONL metainfo file (one recording
per line, with timestamped segments) or a CSV of `path,text` (one segment spanning the file),
and the probe that checks each file and its segments (docs/design.md, "Audio")."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chute._lazy import require
from chute._sndfile_read import UNKNOWN_FRAMES, read_frames
from chute.convert._sources import list_csv
from chute.errors import FormatError
from chute.readers.storage import read_regular_file

__all__ = ["AudioSource", "Probed", "list_audio_jsonl", "list_audio_csv", "probe_audio",
           "check_segments", "segment_frames", "merge_listed", "END_SLACK"]


@dataclass(frozen=True)
class AudioSource:
    path: Path
    key: str
    txt: str = ""
    sample_rate: int | None = None  # what the metadata claims; checked against the file
    segments: list | None = None  # [{"start", "end", "txt"?}, ...]; None = the whole file
    info: dict = field(default_factory=dict)  # other metadata, stored as it is
    conflicting_rates: list = field(default_factory=list)  # rates claimed by its listings


@dataclass(frozen=True)
class Probed:
    data: bytes
    sample_rate: int
    channels: int
    num_frames: int
    segments: list  # the valid segments
    dropped: list  # (segment index, reason) of the invalid ones


# what a JSONL record names besides its audio file; every other top-level entry is kept as
# metadata (as "info" is)
_RECORD_KEYS = ("key", "path", "wav", "txt", "sample_rate", "info", "start", "end")


def list_audio_jsonl(path, root=None) -> list[AudioSource]:
    """Recordings of a JSONL file: `{"key", "path", "txt", "sample_rate", "info": {"segments":
    [{"start", "end", "txt", ...}, ...], ...}}`, or with "wav" naming the file instead of
    "path" (TouchDataset's and WeNet's records); `path` is relative to `root` (default: the
    file's folder) and `key` defaults to it. Other top-level entries are kept in the metadata
    beside "info"'s (which win). A record with top-level "start" and "end" (one utterance of
    a file, as in a WeNet data.list) is that one segment, keyed and transcribed by the record.

    Args:
        path: the JSONL file.
        root: the folder the listed paths are relative to.
    """
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    try:
        # utf-8-sig: a leading byte order mark (Windows editors, spreadsheet exports) is
        # dropped, as read_csv_rows does for CSV listings
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such JSONL file") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc}); save the listing as UTF-8"
                          ) from None
    sources = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{where}: not valid JSON ({exc})") from None
        except (RecursionError, ValueError) as exc:  # nested too deep; a 5,000-digit integer
            raise FormatError(f"{where}: not a recording record ({type(exc).__name__}: "
                              f"{str(exc)[:80]})") from None
        if not isinstance(row, dict):
            raise FormatError(f'{where}: not a recording record; each line needs at least '
                              '{"path": ...} (or {"wav": ...})')
        file = row.get("path", row.get("wav"))
        if not isinstance(file, str) or not file:
            raise FormatError(f'{where}: names no audio file; each line needs "path" (or '
                              f'"wav") with the file\'s path, got keys {sorted(row)}')
        try:
            info = {k: v for k, v in row.items() if k not in _RECORD_KEYS}
            info.update(row.get("info") or {})
            segments = info.pop("segments", None)
            rate = row.get("sample_rate")
            key, txt = str(row.get("key", file)), str(row.get("txt", ""))
            if segments is None and "start" in row and "end" in row:
                segments = [{"key": key, "start": row["start"], "end": row["end"], "txt": txt}]
            sources.append(AudioSource(root / file, key, txt,
                                       None if rate is None else _sample_rate(rate), segments,
                                       info))
        except (TypeError, ValueError, OverflowError) as exc:
            raise FormatError(f"{where}: not a recording record ({exc}); \"info\" must be an "
                              'object and "sample_rate" an integer') from None
    if not sources:
        raise FormatError(f"{path}: lists no recordings")
    return merge_listed(sources)


def _sample_rate(value) -> int:
    """A listed sample rate: a whole number (16000, 16000.0, "16000"); a fraction, a bool or
    anything else is a ValueError (int() would truncate 16000.5 without a word)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"sample_rate {value!r} is not a number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"sample_rate {value!r} is not a whole number")
    return int(value)


def merge_listed(sources: list[AudioSource]) -> list[AudioSource]:
    """One source per file, in the order files are first listed: a file listed several times
    (one line per utterance, as WeNet data.list and Kaldi segments do) becomes one recording
    whose segments are every listing's, each keeping its key, transcript and metadata (a
    listing of the whole file is the segment {"start": 0.0, "end": None}: to its end). Its key
    is the first listing's; a sample rate claimed is checked against the file.

    Args:
        sources: the listed recordings.
    """
    by_path: dict[Path, list[AudioSource]] = {}
    for source in sources:
        by_path.setdefault(Path(source.path), []).append(source)
    merged = []
    for listed in by_path.values():
        if len(listed) == 1:
            merged.append(listed[0])
            continue
        segments: list = []
        for source in listed:
            if source.segments is None:
                segments.append({"key": source.key, "start": 0.0, "end": None,
                                 "txt": source.txt, **source.info})
            elif isinstance(source.segments, list):
                segments.extend(source.segments)
            else:
                segments.append(source.segments)  # probe_audio reports it
        rates = {s.sample_rate for s in listed if s.sample_rate is not None}
        first = listed[0]
        merged.append(AudioSource(first.path, first.key, first.txt,
                                  min(rates) if len(rates) == 1 else None, segments,
                                  dict(first.info), conflicting_rates=sorted(rates)))
    return merged


def list_audio_csv(path, root=None) -> list[AudioSource]:
    """Rows `path,text` (paths relative to `root`, default the CSV's folder), with a header
    row naming the columns or without one (then each row is `path,text`: a first cell with a
    file suffix, like `a.flac`, is no header); each recording is one segment spanning the
    file, with `text` as its transcript."""
    path = Path(path)
    rows = _csv_rows(path)
    header = [cell.strip() for cell in rows[0]] if rows else None
    if header is not None and "path" not in header and Path(header[0]).suffix:
        return merge_listed(_headerless_csv(path, rows,
                                            Path(root) if root is not None else path.parent))
    sources, _ = list_csv(path, root)
    return merge_listed([AudioSource(s.path, s.key, s.meta.get("text") or s.meta.get("txt")
                                     or "") for s in sources])


def _csv_rows(path: Path) -> list[list[str]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return [row for row in csv.reader(f) if row]
    except FileNotFoundError:
        raise FormatError(f"{path}: no such CSV file") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"{path}: cannot read it as UTF-8 CSV ({exc})") from None


def _headerless_csv(path: Path, rows: list[list[str]], root: Path) -> list[AudioSource]:
    sources = []
    for number, row in enumerate(rows, 1):
        if len(row) > 2:
            raise FormatError(f"{path}, line {number}: {len(row)} cells; a CSV without a "
                              "header needs `path,text` rows (quote texts holding commas), or "
                              "add a header row naming the columns")
        sources.append(AudioSource(root / row[0], row[0], row[1] if len(row) > 1 else ""))
    return sources


# Transcript timestamps are often rounded (to 10 ms in Kaldi segment files and many ASR
# exports), so a last segment may end a little after the recording's last frame. An end less
# than this many seconds past it means the last frame; soundfile.read(path, start, stop) gives
# the same frames, as it stops there too. Further past is an error (docs/design.md, "Audio").
END_SLACK = 0.01


def segment_frames(seg, sample_rate: int, num_frames: int) -> tuple[int, int] | str:
    """(start frame, stop frame) of a segment `{"start", "end"}` in seconds, `round(t *
    sample_rate)`, with an end within END_SLACK past the recording's end taken as its last
    frame; or why the segment is invalid (negative, empty or reversed, past the end).

    Args:
        seg: the segment's metadata.
        sample_rate, num_frames: the recording's.
    """
    try:
        start, end = float(seg["start"]), float(seg["end"])
        # in frames too: a huge time (1e308 s) is finite but its frame number is not
        if not all(math.isfinite(t * sample_rate) for t in (start, end)):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        return f"needs finite numeric start and end (seconds), got {seg!r}"
    first, stop = round(start * sample_rate), round(end * sample_rate)
    if start < 0:
        return f"negative start {start}"
    if end <= start:
        return f"end {end} is not after start {start}"
    if stop > num_frames and end - num_frames / sample_rate < END_SLACK:
        stop = num_frames
    if first >= num_frames:
        return (f"starts at {start} s, at or after the end of the recording "
                f"({num_frames / sample_rate:.6f} s)")
    if stop > num_frames:
        return (f"ends at {end} s, past the end of the recording "
                f"({num_frames / sample_rate:.6f} s)")
    if stop <= first:
        return (f"start {start} and end {end} round to the same frame at {sample_rate} Hz "
                "(an empty segment)")
    return first, stop


def check_segments(segments: list, sample_rate: int, num_frames: int) -> list[str | None]:
    """Per segment: None when `segment_frames` accepts it, else why not."""
    frames = (segment_frames(seg, sample_rate, num_frames) for seg in segments)
    return [f if isinstance(f, str) else None for f in frames]


def truncated_wav(data: bytes) -> str | None:
    """Why a RIFF WAV file is cut short (its data chunk declares more bytes than the file
    holds), else None. libsndfile reads such a file without an error, as the frames present,
    so the probe's decode cannot tell; a writer that streamed (a size of 0 or 0xFFFFFFFF,
    unknown when the header was written) is not refused, nor a file short of less than one
    frame (nothing lost).

    Args:
        data: the file's bytes.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at, frame = 12, 1
    while at + 8 <= len(data):
        chunk, size = data[at:at + 4], int.from_bytes(data[at + 4:at + 8], "little")
        if chunk == b"fmt " and at + 22 <= len(data):  # nBlockAlign: bytes per frame
            frame = max(1, int.from_bytes(data[at + 20:at + 22], "little"))
        if chunk == b"data":
            held = len(data) - (at + 8)
            if size in (0, 0xFFFFFFFF) or size - held < frame:
                return None
            return (f"truncated WAV: its data chunk declares {size} bytes but the file holds "
                    f"{held}")
        at += 8 + size + (size & 1)  # chunks are padded to an even size
    return None


def probe_audio(source: AudioSource) -> Probed | str:
    """Read and fully decode one file (a corrupt frame anywhere is found now, not in training);
    a string says why it cannot be used."""
    sf = require("soundfile", "audio")
    try:
        data = read_regular_file(source.path)
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate, channels, frames = f.samplerate, f.channels, f.frames
            block = np.empty((65536, channels), np.float32)
            decoded = 0
            while (n := read_frames(sf, f, block)) > 0:
                decoded += n
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        # libsndfile's own words: str() of an open error names the in-memory buffer's repr
        detail = getattr(exc, "error_string", None) or str(exc)
        return f"cannot decode it as audio: {detail}"
    if frames == UNKNOWN_FRAMES:
        frames = decoded  # a FLAC written as a stream: its header leaves the length out
    if (short := truncated_wav(data)) is not None:
        return short
    if decoded != frames:
        return f"decodes to {decoded} frames but its header says {frames} (corrupt or truncated)"
    if source.sample_rate is not None and source.sample_rate != rate:
        return f"metadata says sample_rate {source.sample_rate} but the file has {rate}"
    if len(source.conflicting_rates) > 1:
        return (f"it is listed several times with different sample rates "
                f"{source.conflicting_rates}; the file has {rate}")
    segments = source.segments
    if segments is None:
        segments = [{"start": 0.0, "end": frames / rate, "txt": source.txt}]
    elif not isinstance(segments, list):
        return (f'its "segments" is a {type(segments).__name__}, not a list of '
                '{"start", "end", "txt"} objects')
    # "end": null is the recording's end (a whole file listed beside its segments)
    segments = [{**seg, "end": frames / rate} if isinstance(seg, dict) and "end" in seg
                and seg["end"] is None else seg for seg in segments]
    kept, dropped = [], []
    for index, (seg, problem) in enumerate(zip(segments, check_segments(segments, rate, frames),
                                               strict=True)):
        if problem is None:
            kept.append(seg)
        else:
            dropped.append((index, problem))
    return Probed(data, rate, channels, frames, kept, dropped)
