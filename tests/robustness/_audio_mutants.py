"""Seeded mutants of an audio listing (issue 26 item 16): one line of a JSONL (or one row of a
`path,text` CSV) with a hostile path (`../`, absolute, a folder, a FIFO, a device, NUL, another
recording), a bad or huge number (sample rate, segment times: negative, 1e308, 5,000 digits,
NaN, strings), a value of the wrong type (key, txt, info, segments), duplicated keys, lines and
files, or broken text (invalid UTF-8, NUL, a BOM, CRLF, truncation, deep nesting).

`write_source(folder)` writes the recordings of tests/_audio.py (FILES) into `folder`, with a
FIFO and a folder beside them. `mutants(seed, count)` returns (name, build) pairs: `build(folder)`
writes the mutated listing into `folder` and returns (its path, the files whose samples the
mutation touched: they may be skipped, merged or hold another line's text; every other file
must be stored as it is listed). Everything is a pure function of the seed."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

from tests._audio import segments_of, write_recordings
from tests.robustness._listing import draw_row, write_mutated

FILES = ("a.wav", "b.flac", "c.flac", "d.wav")
Build = Callable[[Path], tuple[Path, set[str]]]


def write_source(folder: Path) -> None:
    """The recordings, plus `fifo.wav` (a FIFO) and `folder.wav` (a folder) beside them."""
    write_recordings(folder, names=FILES)
    os.mkfifo(folder / "fifo.wav")
    (folder / "folder.wav").mkdir()


def _record(name: str) -> dict:
    return {"key": name, "path": name, "txt": f"all of {name}", "sample_rate":
            {"a.wav": 16000, "b.flac": 16000, "c.flac": 22050, "d.wav": 8000}[name],
            "info": {"segments": segments_of(name), "speaker": name[0]}}


# paths: "{f}" is the victim's own file name, "{abs}" its absolute path
_PATHS = ["../{dir}/{f}", "{abs}", "./{f}", "sub/../{f}", "missing.wav", "", ".", "..", "/",
          "/etc/passwd", "/dev/zero", "/dev/null", "fifo.wav", "folder.wav", "{f}\x00x",
          "../../../../../../{f}", "b.flac", " {f}", "{f}/"]
_ODD = [5, None, ["a.wav"], {"a": 1}, True]
_NUMBERS = ["-1", "0", "1e30", "1e308", "9" * 5000, '"16000"', "16000.5", "NaN", "Infinity",
            "true", "null", "[]", "{}", "-1e-300", str(2**63), str(2**64), "-0", "1E400"]


def _lines(records: list[dict]) -> list[str]:
    return [json.dumps(r) for r in records]


def _jsonl(change: Callable[[list[dict], list[str], Path], None], touched: set[str]) -> Build:
    def build(folder: Path) -> tuple[Path, set[str]]:
        records = [_record(f) for f in FILES]
        lines = _lines(records)
        change(records, lines, folder)
        path = folder / "rec.jsonl"
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
        return path, touched
    return build


def _j_path(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(len(FILES))
    f = FILES[k]
    form = rng.choice(_PATHS + _ODD)
    touched = {f, "b.flac"}

    def change(records, lines, folder):
        if isinstance(form, str):
            value = form.format(f=f, abs=folder / f, dir=folder.name)
        else:
            value = form
        records[k]["path"] = value
        lines[k] = json.dumps(records[k])
    return f"jsonl path {form!r} (line {k})", _jsonl(change, touched)


def _j_number(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(len(FILES))
    where = rng.choice(["sample_rate", "start", "end", "top-start", "top-end"])
    value = rng.choice(_NUMBERS)
    segment = rng.randrange(3)

    def change(records, lines, folder):
        record = records[k]
        if where == "sample_rate":
            record["sample_rate"] = "@@"
        elif where.startswith("top-"):
            record["start"], record["end"] = 0.0, 0.5
            record[where[4:]] = "@@"
            del record["info"]["segments"]
        else:
            record["info"]["segments"][segment][where] = "@@"
        lines[k] = json.dumps(record).replace('"@@"', value)
    return f"jsonl number {where}={value[:12]} (line {k}, segment {segment})", \
        _jsonl(change, {FILES[k]})


def _j_type(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(len(FILES))
    key = rng.choice(["key", "txt", "info", "segments", "segment", "speaker"])
    value = rng.choice([5, None, [], {}, "x", [1], [[{"start": 0}]], {"start": 0.1},
                        "k" * 100_000, 1.5, True, {"start": 0.1, "end": 0.2}])

    def change(records, lines, folder):
        record = records[k]
        if key == "segments":
            record["info"]["segments"] = value
        elif key == "segment":
            record["info"]["segments"][0] = value
        elif key == "speaker":
            record["info"]["speaker"] = value
        else:
            record[key] = value
        lines[k] = json.dumps(record)
    return f"jsonl type {key}={str(value)[:20]!r} (line {k})", _jsonl(change, {FILES[k]})


def _j_duplicate(rng: random.Random) -> tuple[str, Build]:
    k, other = rng.sample(range(len(FILES)), 2)
    how = rng.choice(["json key", "line", "same key", "same file other rate", "same file"])
    f, g = FILES[k], FILES[other]

    def change(records, lines, folder):
        if how == "json key":  # the last "path" wins, as in every JSON parser chute uses
            lines[k] = lines[k].replace('"path": ', f'"path": "{g}", "path": ', 1)
        elif how == "line":
            lines.append(lines[k])
        elif how == "same key":
            lines[other] = json.dumps({**records[other], "key": f})
        elif how == "same file other rate":
            lines.append(json.dumps({**records[k], "sample_rate": 44100}))
        else:
            lines[other] = json.dumps({**records[other], "path": f})
    return f"jsonl duplicate {how} (lines {k}, {other})", _jsonl(change, {f, g})


def _j_text(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(len(FILES))
    how = rng.choice(["not-utf8", "nul", "bom", "crlf", "truncate", "deep", "empty-lines",
                      "null", "list", "number", "huge-line", "lone-surrogate", "whole-cut"])
    cut = rng.randrange(1 << 30)

    def change(records, lines, folder):
        line = lines[k]
        if how == "not-utf8":
            lines[k] = line.replace("all of", "all\udcff of", 1)  # written as the byte 0xff
        elif how == "nul":
            lines[k] = line.replace("all of", "all\x00of", 1)
        elif how == "bom":
            lines[0] = "\ufeff" + lines[0]
        elif how == "crlf":
            lines[:] = [x + "\r" for x in lines]
        elif how == "truncate":
            lines[k] = line[:cut % len(line)]
        elif how == "deep":
            lines[k] = "[" * 100_000 + "]" * 100_000
        elif how == "empty-lines":
            lines.insert(k, "   ")
        elif how in ("null", "list", "number"):
            lines[k] = {"null": "null", "list": "[]", "number": "5"}[how]
        elif how == "huge-line":
            lines[k] = json.dumps({**records[k], "txt": "t" * 2_000_000})
        elif how == "lone-surrogate":
            lines[k] = line.replace("all of", "all \\ud800 of", 1)
        else:
            text = "\n".join(lines)
            lines[:] = [text[:cut % len(text)]]
    return f"jsonl text {how} (line {k}, {cut})", _jsonl(change, set(FILES) if how in (
        "whole-cut",) else {FILES[k]})


def _csv(rng: random.Random) -> tuple[str, Build]:
    m = draw_row(rng, len(FILES), ["path", "path", "text", "cells", "header", "quote",
                                   "not-utf8", "nul", "duplicate"], _PATHS,
                 ["", "t" * 200_000, "a\nb", "\x00", "é" * 10, "=1+1", '"'],
                 [["path", "path"], ["file", "text"], ["text", "path"], [""],
                  ["path", "text", "path"], ["PATH", "TEXT"]])
    f = FILES[m.k]

    def build(folder: Path) -> tuple[Path, set[str]]:
        path = write_mutated(folder / "rec.csv", FILES, [f"all of {g}" for g in FILES], m)
        return path, set(FILES) if m.how == "header" else {f, "b.flac"}

    return f"csv {m.how} {m.form if m.how == 'path' else m.text[:10]!r} (row {m.k})", build


_KINDS = [(_j_path, 3), (_j_number, 3), (_j_type, 2), (_j_duplicate, 2), (_j_text, 2),
          (_csv, 3)]


def mutants(seed: int, count: int) -> list[tuple[str, Build]]:
    """`count` seeded (name, build) pairs."""
    rng = random.Random(seed)
    kinds = [k for k, weight in _KINDS for _ in range(weight)]
    return [(f"{k:03d} {name}", build) for k in range(count)
            for name, build in [rng.choice(kinds)(rng)]]
