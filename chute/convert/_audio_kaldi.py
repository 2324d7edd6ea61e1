"""Kaldi data folders for `chute convert audio`: `wav.scp` (recording id, file), optional
`segments` (utterance id, recording id, start, end in seconds), `text` (utterance id,
transcript) and `utt2spk` (utterance id, speaker) -> one AudioSource per recording, its
utterances as segments (docs/audio.md, "Importing")."""

from __future__ import annotations

import re
from pathlib import Path

from chute.convert._audio_sources import AudioSource, merge_listed
from chute.errors import FormatError

__all__ = ["is_kaldi_folder", "list_kaldi"]


def is_kaldi_folder(path) -> bool:
    """Whether `path` is a Kaldi data folder (holds a wav.scp).

    Args:
        path: the convert source.
    """
    return Path(path).is_dir() and (Path(path) / "wav.scp").is_file()


def _table(path: Path, columns: int) -> list[tuple[int, list[str]]]:
    """(line number, fields) of a Kaldi table: `columns` fields split on whitespace, the last
    one the rest of the line (a transcript keeps its spaces); blank lines skipped."""
    try:
        # utf-8-sig: a leading byte order mark is dropped (else it joins the first id)
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=columns - 1)
        if len(fields) < columns and columns > 2:
            raise FormatError(f"{path}, line {number}: {len(fields)} fields, expected "
                              f"{columns} (a Kaldi `{path.name}` line)")
        rows.append((number, fields + [""] * (columns - len(fields))))
    return rows


def _optional(folder: Path, name: str, columns: int) -> dict[str, tuple[int, list[str]]]:
    path = folder / name
    if not path.is_file():
        return {}
    found: dict[str, tuple[int, list[str]]] = {}
    for number, fields in _table(path, columns):
        if fields[0] in found:
            raise FormatError(f"{path}, line {number}: id {fields[0]!r} appears twice (first "
                              f"on line {found[fields[0]][0]})")
        found[fields[0]] = (number, fields[1:])
    return found


def _seconds(path: Path, number: int, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise FormatError(f"{path}, line {number}: {value!r} is not a time in seconds") from None


def list_kaldi(folder, root=None) -> list[AudioSource]:
    """The recordings of a Kaldi data folder, in wav.scp's order. A recording's segments are
    its utterances in `segments` (in that file's order; an end of -1 is the recording's end)
    with "key" (utterance id), "txt" (from `text`) and "speaker" (from `utt2spk`, when
    listed); without `segments` each recording is one utterance spanning it. wav.scp entries
    must name files (relative to `root`, default the current folder, as Kaldi recipes run
    from theirs): a command (`... |`) or an archive offset (`file.ark:123`) is refused.

    Args:
        folder: the data folder (or its wav.scp).
        root: the folder the wav.scp paths are relative to.
    """
    folder = Path(folder)
    folder = folder.parent if folder.name == "wav.scp" else folder
    root = Path(root) if root is not None else Path.cwd()
    scp = folder / "wav.scp"
    if not scp.is_file():
        raise FormatError(f"{folder}: no wav.scp; a Kaldi data folder lists its recordings "
                          "there (`<recording-id> <file>` per line)")
    recordings: dict[str, tuple[int, Path]] = {}
    for number, (rec, file) in _table(scp, 2):
        file = file.strip()
        if not file:
            raise FormatError(f"{scp}, line {number}: recording {rec!r} names no file")
        if re.search(r"\.ark:\d+$", file):
            raise FormatError(f"{scp}, line {number}: recording {rec!r} is inside a Kaldi "
                              f"archive ({file!r}); list the audio files themselves")
        if file.endswith("|"):
            raise FormatError(f"{scp}, line {number}: recording {rec!r} is a command "
                              f"({file[:60]!r}); chute stores files as they are: write the "
                              "audio to files (e.g. run the command into a .flac) and list "
                              "those")
        if rec in recordings:
            raise FormatError(f"{scp}, line {number}: recording id {rec!r} appears twice")
        recordings[rec] = (number, root / file)
    texts = _optional(folder, "text", 2)
    speakers = _optional(folder, "utt2spk", 2)
    segments_file = folder / "segments"
    by_recording: dict[str, list[dict]] = {rec: [] for rec in recordings}
    if segments_file.is_file():
        seen: set[str] = set()
        for number, (utt, rec, start, end) in _table(segments_file, 4):
            if rec not in recordings:
                raise FormatError(f"{segments_file}, line {number}: utterance {utt!r} is in "
                                  f"recording {rec!r}, which wav.scp does not list")
            if utt in seen:
                raise FormatError(f"{segments_file}, line {number}: utterance id {utt!r} "
                                  "appears twice")
            seen.add(utt)
            stop = _seconds(segments_file, number, end.strip())
            by_recording[rec].append(_utterance(
                utt, _seconds(segments_file, number, start), None if stop == -1 else stop,
                texts, speakers))
    else:
        for rec in recordings:
            by_recording[rec].append(_utterance(rec, 0.0, None, texts, speakers))
    # a recording without utterances is stored with an empty segment list (unit="recording"
    # still delivers it), as listed
    return merge_listed([AudioSource(path, rec, "", None, by_recording[rec])
                         for rec, (_, path) in recordings.items()])


def _utterance(utt: str, start: float, end: float | None, texts: dict, speakers: dict) -> dict:
    segment: dict = {"key": utt, "start": start, "end": end,
                     "txt": texts[utt][1][0].strip() if utt in texts else ""}
    if utt in speakers:
        segment["speaker"] = speakers[utt][1][0].strip()
    return segment
