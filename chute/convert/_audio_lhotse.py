"""lhotse manifests for `chute convert audio`: a recordings manifest (JSONL, optionally
gzipped) with an optional supervisions manifest, or a cuts manifest -> one AudioSource per
file, its supervisions (or cuts) as segments (docs/audio.md, "Importing")."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from chute.convert._audio_sources import AudioSource, merge_listed
from chute.errors import FormatError

__all__ = ["lhotse_kind", "list_lhotse"]

# a supervision's entries that its segment gets under chute's own names
_SUPERVISION_OWN = ("id", "recording_id", "start", "duration", "text")


def _lines(path: Path):
    """(line number, record) of a JSONL file, gzipped when its name ends in .gz."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        # utf-8-sig: a leading byte order mark is dropped, as for CSV listings
        with opener(path, "rt", encoding="utf-8-sig") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise FormatError(f"{path}, line {number}: not valid JSON ({exc})"
                                          ) from None
    except FileNotFoundError:
        raise FormatError(f"{path}: no such manifest") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: cannot read it ({exc})") from None


def lhotse_kind(path) -> str | None:
    """"recordings", "supervisions" or "cuts" for a lhotse manifest (told from its first
    record), else None.

    Args:
        path: a .jsonl or .jsonl.gz file.
    """
    path = Path(path)
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        return None
    for _, row in _lines(path):
        if not isinstance(row, dict):
            return None
        if "sources" in row and "sampling_rate" in row:
            return "recordings"
        if "recording_id" in row and "duration" in row:
            return "supervisions"
        if "recording" in row and "duration" in row and "supervisions" in row:
            return "cuts"
        return None
    return None


def _file_of(path: Path, number: int, recording, root: Path) -> tuple[str, Path, int]:
    """(id, file, sampling rate) of a lhotse recording that is one audio file."""
    try:
        rid, sources, rate = recording["id"], recording["sources"], int(recording["sampling_rate"])
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{path}, line {number}: not a lhotse recording (needs id, sources "
                          "and sampling_rate)") from None
    if not isinstance(sources, list) or len(sources) != 1 or not isinstance(sources[0], dict):
        raise FormatError(f"{path}, line {number}: recording {rid!r} has "
                          f"{len(sources) if isinstance(sources, list) else 'no'} sources; "
                          "chute stores one file per recording (join the channels into one "
                          "file first)")
    source = sources[0]
    if source.get("type") != "file" or not isinstance(source.get("source"), str):
        raise FormatError(f"{path}, line {number}: recording {rid!r} is a "
                          f"{source.get('type')!r} source; chute reads files only (save the "
                          "audio to files first)")
    return str(rid), root / source["source"], rate


def _segment(path: Path, number: int, sup, offset: float = 0.0) -> dict:
    try:
        start = float(sup["start"]) + offset
        end = start + float(sup["duration"])
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{path}, line {number}: a supervision needs numeric start and "
                          f"duration, got {sup!r:.120}") from None
    extra = {k: v for k, v in sup.items() if k not in _SUPERVISION_OWN}
    return {"key": sup.get("id"), "start": start, "end": end, "txt": sup.get("text") or "",
            **extra}


def list_lhotse(manifest, supervisions=None, root=None) -> list[AudioSource]:
    """The recordings of a lhotse recordings manifest, each with the supervisions of
    `supervisions` that name it as segments ({"key": its id, "start", "end", "txt": its
    text, and its other entries: speaker, language, channel, custom, ...}); without
    supervisions each recording is one segment spanning it. Or, for a cuts manifest, each cut
    is a segment of its recording ({"key": cut id, "start", "end", "txt": its supervisions'
    texts joined by spaces, "supervisions": theirs, times relative to the cut as lhotse keeps
    them}). Only "file" sources are read (relative to `root`, default the current folder).

    Args:
        manifest: a recordings or cuts manifest (.jsonl or .jsonl.gz).
        supervisions: a supervisions manifest for a recordings manifest.
        root: the folder relative source paths are relative to.
    """
    manifest = Path(manifest)
    root = Path(root) if root is not None else Path.cwd()
    kind = lhotse_kind(manifest)
    if kind == "cuts":
        if supervisions is not None:
            raise FormatError(f"{manifest}: a cuts manifest holds its supervisions; pass "
                              "supervisions only with a recordings manifest")
        return _cuts(manifest, root)
    if kind != "recordings":
        raise FormatError(f"{manifest}: not a lhotse recordings or cuts manifest"
                          + (" (a supervisions manifest goes with its recordings: pass the "
                             "recordings manifest and --supervisions)"
                             if kind == "supervisions" else ""))
    recordings: dict[str, tuple[Path, int]] = {}
    for number, row in _lines(manifest):
        rid, file, rate = _file_of(manifest, number, row, root)
        if rid in recordings:
            raise FormatError(f"{manifest}, line {number}: recording id {rid!r} appears twice")
        recordings[rid] = (file, rate)
    segments: dict[str, list[dict]] | None = None
    if supervisions is not None:
        supervisions = Path(supervisions)
        segments = {rid: [] for rid in recordings}
        for number, sup in _lines(supervisions):
            named = sup.get("recording_id") if isinstance(sup, dict) else None
            if named not in segments:
                raise FormatError(f"{supervisions}, line {number}: supervision of recording "
                                  f"{named!r}, which {manifest.name} does not list")
            segments[named].append(_segment(supervisions, number, sup))
    return merge_listed([AudioSource(file, rid, "", rate,
                                     None if segments is None else segments[rid])
                         for rid, (file, rate) in recordings.items()])


def _cuts(manifest: Path, root: Path) -> list[AudioSource]:
    sources = []
    for number, cut in _lines(manifest):
        rid, file, rate = _file_of(manifest, number, cut.get("recording"), root)
        sups = cut.get("supervisions") or []
        segment = _segment(manifest, number, {"id": cut.get("id"), "start": cut.get("start"),
                                              "duration": cut.get("duration")})
        segment["txt"] = " ".join(s.get("text") or "" for s in sups if s.get("text"))
        segment["supervisions"] = sups
        if "channel" in cut:
            segment["channel"] = cut["channel"]
        sources.append(AudioSource(file, rid, "", rate, [segment]))
    return merge_listed(sources)
