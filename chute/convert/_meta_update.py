"""Replacing per-sample JSON metadata without touching payload files.

The new metadata is written as a new file generation (`meta.1.bin/.idx`, then `meta.2...`) in
every shard; the manifest rename switches readers over atomically, then the old files go.

A field that mirrors an entry of the metadata (a video dataset's `text`: the caption that
`meta["text"]` also holds, docs/video.md) gets its new generation in the same update, switched
over by the same manifest rename, so the two never disagree."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chute.convert.destination._dest_lock import DestinationLock
from chute.errors import ChuteError, FormatError
from chute.readers import Dataset, open_dataset
from chute.readers.format import MANIFEST, write_manifest
from chute.readers.kinds import field_files, field_stem, get_kind
from chute.readers.storage import is_disk_full, local_path, no_space

__all__ = ["MetaUpdate", "update_metadata"]

# what `chute convert` stores twice: a video dataset's caption, the metadata field "meta"'s
# entry "text", is also the json field "text" (readers of that field must see what the
# metadata says): (source kind, metadata field, mirroring field, metadata entry)
_CAPTION = ("video", "meta", "text", "text")


# what follows a field's name in the files of its first generation (`meta.bin`, `meta.idx`;
# an ndarray's `x.rows.npy`)
_FIRST_GENERATION = ("bin", "idx", "npy", "rows")


@dataclass(frozen=True)
class MetaUpdate:
    updated: int
    unmatched: list[str]  # keys in the file that match no sample (only with allow_unmatched)
    files: list[str]  # metadata files written
    # (key#segmentN, why) of segments an audio dataset cannot deliver, dropped as convert does
    dropped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # fields rewritten with the metadata because they mirror an entry of it (a video's "text")
    mirrored: list[str] = dataclasses.field(default_factory=list)


def _read_updates(jsonl: Path, key: str) -> dict[str, dict]:
    updates = {}
    try:
        data = Path(jsonl).read_bytes()
    except FileNotFoundError:
        raise ChuteError(f"{jsonl}: no such file") from None
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        where = data.count(b"\n", 0, exc.start) + 1
        raise ChuteError(f"{jsonl}:{where}: not UTF-8 text (byte {data[exc.start]:#04x}); save "
                         "the file as UTF-8") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ChuteError(f"{jsonl}:{number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise ChuteError(f"{jsonl}:{number}: JSON nested too deeply to read (more than "
                             "about a thousand levels); flatten the record") from None
        if not isinstance(record, dict) or not isinstance(record.get(key), str):
            raise ChuteError(f"{jsonl}:{number}: needs a JSON object with a string {key!r}")
        if record[key] in updates:
            raise ChuteError(f"{jsonl}:{number}: key {record[key]!r} appears twice")
        updates[record[key]] = record
    return updates


def _next_stem(field: str, stem: str) -> str:
    """`meta` -> `meta.1` -> `meta.2`; the generation is what follows the field's own name
    (which may itself contain dots)."""
    rest = stem[len(field) + 1:] if stem.startswith(f"{field}.") else ""
    generation = int(rest) if rest.isdigit() else 0
    return f"{field}.{generation + 1}"


def update_metadata(path, jsonl, *, key: str = "key", field: str = "meta", merge: bool = False,
                    allow_unmatched: bool = False, strict: bool = False,
                    wait: float = 60.0) -> MetaUpdate:
    """Replace (or with `merge`, update) the metadata of the samples whose `meta[key]` equals a
    record's `key` in FILE.jsonl (one JSON object per line). Other samples keep theirs.

    On an audio dataset (`num_frames` and `sample_rate` columns) the "segments" of every updated
    record are checked as `chute convert audio` checks them: a segment past the end of its
    recording, negative, reversed or empty is dropped and listed in `MetaUpdate.dropped` (with
    `strict`, the update is refused and nothing is written).

    On a video dataset the `text` field (the caption `meta["text"]` also holds) takes each
    updated record's "text" (None without one), switched over with the metadata by the same
    manifest write; `MetaUpdate.mirrored` names it when any caption changed.

    The dataset's lock (the one a convert holds) is taken first, waiting up to `wait` seconds
    for another update or convert: two updates run one after the other, and the second reads
    the first one's result, so none is lost.

    Args:
        path: the dataset folder.
        jsonl: the records, one JSON object per line.
        key: the metadata entry records are matched on.
        field: the JSON field updated.
        merge: merge each record into the current metadata instead of replacing it.
        allow_unmatched: ignore records whose key matches no sample (default: an error).
        strict: refuse an update holding a segment the recording cannot deliver.
        wait: seconds to wait for the dataset's lock.
    """
    root = local_path(path)
    root = root.parent if root.name == MANIFEST else root
    with DestinationLock(root, purpose="chute meta update", wait=wait):
        _, meta_field, mirror, _ = _CAPTION
        _clean_leftovers(root, {field, mirror} if field == meta_field else {field})
        return _update(path, jsonl, key, field, merge, allow_unmatched, strict)


def _generation_name(field: str, name: str) -> bool:
    """True for a file of a generation of `field` (`meta.3.bin`, or the first one's
    `meta.bin`, which an update killed right after its switch-over leaves), or the temporary
    file of any write (`.meta.3.bin.tmp-PID`)."""
    if name.startswith(".") and ".tmp-" in name:
        return True
    rest = name[len(field) + 1:] if name.startswith(f"{field}.") else ""
    generation, _, _ext = rest.partition(".")
    return generation.isdigit() or generation in _FIRST_GENERATION


def _clean_leftovers(root: Path, fields: set[str]) -> None:
    """With the dataset's lock held: remove what an update of `fields` killed before its
    switch-over left in the shard folders (temporary files, and generation files the manifest
    does not list), which nothing else would ever remove."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        shards = [(s["name"], set(s["files"])) for s in manifest["shards"]]
    except (OSError, ValueError, KeyError, TypeError):
        return  # opening the dataset names what is wrong
    for name, listed in shards:
        folder = root / str(name)
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in os.scandir(folder):
            if entry.name not in listed and entry.is_file(follow_symlinks=False) and \
                    any(_generation_name(field, entry.name) for field in fields):
                os.unlink(entry.path)


def _update(path, jsonl, key: str, field: str, merge: bool, allow_unmatched: bool,
            strict: bool = False) -> MetaUpdate:
    ds = open_dataset(path)
    if not isinstance(ds, Dataset) or ds.manifest["format"] != "chute" or field not in ds.fields:
        raise ChuteError(f"{ds.path}: has no metadata field {field!r} to update")
    current = ds.read(field, np.arange(len(ds)))
    if not all(isinstance(m, dict) for m in current):
        raise ChuteError(f"{ds.path}: field {field!r} does not hold a JSON object per sample; "
                         "name the metadata field with --field")
    updates = _read_updates(Path(jsonl), key)
    ids: dict[Any, int] = {}
    for i, meta in enumerate(current):
        k = meta.get(key) if isinstance(meta, dict) else None
        if k in ids:
            raise FormatError(f"{ds.path}: samples {ids[k]} and {i} share {key}={k!r}; "
                              "keys must be unique to match updates")
        if k is not None:
            ids[k] = i
    unmatched = [k for k in updates if k not in ids]
    if unmatched and not allow_unmatched:
        raise ChuteError(f"{jsonl}: {len(unmatched)} keys match no sample of {ds.path} "
                         f"(first: {unmatched[0]!r}); fix them or pass --allow-unmatched")
    dropped: list[tuple[str, str]] = []
    audio = None  # (sample rates, frame counts) of an audio dataset's recordings
    if {"num_frames", "sample_rate"} <= set(ds.fields):
        audio = (np.asarray(ds.column("sample_rate"), np.int64),
                 np.asarray(ds.column("num_frames"), np.int64))
    for k, record in updates.items():
        if k in ids:
            i = ids[k]
            current[i] = {**current[i], **record} if merge else record
            if audio is not None:
                current[i] = _checked_segments(jsonl, i, current[i], int(audio[0][i]),
                                               int(audio[1][i]), strict, dropped)
    mirrored = _mirrored(ds, field, current, [ids[k] for k in updates if k in ids])
    return MetaUpdate(len(updates) - len(unmatched), unmatched,
                      _rewrite(ds, field, current, mirrored), dropped, list(mirrored))


def _mirrored(ds, field: str, records: list, changed: list[int]) -> dict[str, list]:
    """{mirroring field: its new values} when `field` of `ds` has a mirror (`_CAPTION`) whose
    values `records` (the updated metadata) change: the samples `changed` take
    `records[i].get(entry)`; else {} (the mirror's files stay as they are)."""
    source = ds.manifest.get("source")
    kind = source.get("kind") if isinstance(source, dict) else None
    source_kind, meta_field, name, entry = _CAPTION
    if kind != source_kind or field != meta_field or name not in ds.fields or \
            ds.specs[name]["kind"] != "json":
        return {}
    values = list(ds.read(name, np.arange(len(ds))))
    new = list(values)
    for i in changed:
        new[i] = records[i].get(entry)
    return {name: new} if new != values else {}


def _checked_segments(jsonl, i: int, record: dict, rate: int, frames: int, strict: bool,
                      dropped: list[tuple[str, str]]) -> dict:
    """`record` with the segments recording `i` (`frames` frames at `rate`) cannot deliver
    dropped and listed in `dropped`, as `convert_audio` drops them; with `strict` the first
    one raises. A record without "segments" is returned as it is."""
    from chute.convert._audio_sources import check_segments

    segments = record.get("segments")
    if segments is None:
        return record
    name = record.get("key", f"sample {i}")
    if not isinstance(segments, list):
        raise ChuteError(f"{jsonl}: the record of {name!r} has \"segments\" of type "
                         f"{type(segments).__name__}; it must be a list of "
                         '{"start", "end", "txt"} objects (seconds)')
    problems = check_segments(segments, rate, frames)
    bad = [(f"{name}#segment{s}", why) for s, why in enumerate(problems) if why is not None]
    if bad and strict:
        where, why = bad[0]
        raise ChuteError(f"{jsonl}: segment {where}: {why}; {len(bad)} segment(s) of this "
                         "record cannot be delivered: fix them, or update without --strict "
                         "to drop them as convert does (nothing was written)")
    if not bad:
        return record
    dropped.extend(bad)
    return {**record, "segments": [seg for seg, why in zip(segments, problems, strict=True)
                                   if why is None]}


def _rewrite(ds, field: str, records: list, mirrored: dict[str, list] | None = None
             ) -> list[str]:
    """Write `records` as a new generation of `field`'s files with the field's own kind, and
    each of `mirrored`'s fields (name -> records) likewise; one manifest write switches them
    all over."""
    manifest = json.loads(json.dumps(ds.manifest))  # deep copy
    columns = {field: records, **(mirrored or {})}
    old_of: dict[str, list[str]] = {}
    new_files: list[str] = []
    for name in columns:
        spec = manifest["fields"][name]
        old_of[name] = list(field_files(name, spec))
        spec["file"] = _next_stem(name, field_stem(name, spec))
        new_files += field_files(name, spec)
    try:
        written = []
        for name, values in columns.items():
            spec = manifest["fields"][name]
            written += _write_generation(ds, manifest, get_kind(spec["kind"]), name, spec,
                                         old_of[name], values)
        write_manifest(ds.path, manifest)  # the switch-over, of every field at once
    except BaseException as exc:
        if not _switched(Path(ds.path), field, manifest["fields"][field]["file"]):
            # the old metadata stays the dataset's: the new generations must not stay behind
            for shard in manifest["shards"]:
                for name in new_files:
                    (Path(ds.path) / shard["name"] / name).unlink(missing_ok=True)
            if is_disk_full(exc) and not isinstance(exc, ChuteError):
                raise no_space(ds.path, f"the metadata of field {field!r} (the dataset was "
                               "left as it was)") from None
        raise
    for shard in manifest["shards"]:
        for old in (name for names in old_of.values() for name in names):
            (Path(ds.path) / shard["name"] / old).unlink(missing_ok=True)
    return written


def _switched(root: Path, field: str, stem: str) -> bool:
    """True when the manifest on disk already names generation `stem` of `field`."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        return manifest["fields"][field].get("file") == stem
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _write_generation(ds, manifest: dict, kind, field: str, spec: dict, old_files: list[str],
                      records: list) -> list[str]:
    """Each shard's files of `field`'s new generation, written and entered in `manifest`."""
    written: list[str] = []
    start = 0
    for shard in manifest["shards"]:
        folder = Path(ds.path) / shard["name"]
        count = shard["num_samples"]
        column = kind.writer(folder, spec["file"], spec)
        try:
            for offset, record in enumerate(records[start:start + count]):
                column.add(kind.encode(field, spec, record, start + offset))
            files = column.commit()
        except BaseException:
            column.abort()
            raise
        start += count
        for old in old_files:
            shard["files"].pop(old)
        shard["files"].update(files)
        shard["files"] = dict(sorted(shard["files"].items()))
        written += [str(folder / name) for name in files]
    return written
