"""One row of a `path,text` CSV listing mutated, shared by the audio and video mutants
(`_audio_mutants.py`, `_video_mutants.py`): the row's path, text or cells, the header, the
row duplicated, or the written text broken (a stray quote, invalid UTF-8, NUL, a BOM)."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import NamedTuple


class RowMutation(NamedTuple):
    """What `draw_row` drew: the row `k`, the mutation `how`, and the path form, text and
    header it may use."""

    k: int
    how: str
    form: str
    text: str
    header: list[str]


def draw_row(rng: random.Random, count: int, hows: list[str], paths: list[str],
             texts: list[str], headers: list[list[str]]) -> RowMutation:
    """Draw one row mutation; the draws are always these five, in this order, so that a seed
    names the same mutant whichever `how` comes out.

    Args:
        rng: the suite's generator.
        count: how many rows the listing has (besides its header).
        hows: the mutations to choose from (repeat one to weigh it).
        paths: path forms: "{f}" is the row's own file name, "{abs}" its absolute path,
            "{dir}" the name of the folder holding it.
        texts: replacement texts.
        headers: replacement headers.
    """
    k = rng.randrange(count)
    how = rng.choice(hows)
    form, text = rng.choice(paths), rng.choice(texts)
    return RowMutation(k, how, form, text, rng.choice(headers))


def write_mutated(path: Path, files: tuple[str, ...], labels: list[str],
                  m: RowMutation) -> Path:
    """Write the CSV listing `files` with texts `labels` (each holding a space) to `path`
    (beside the files), with mutation `m` applied; return `path`.

    Args:
        path: the CSV to write, in the folder of the listed files.
        files: the listed file names, one row each.
        labels: each row's text.
        m: the mutation.
    """
    f, label = files[m.k], labels[m.k]
    rows = [["path", "text"]] + [[g, t] for g, t in zip(files, labels, strict=True)]
    row = rows[m.k + 1]
    if m.how == "path":
        row[0] = m.form.format(f=f, abs=path.parent / f, dir=path.parent.name)
    elif m.how == "text":
        row[1] = m.text
    elif m.how == "cells":
        rows[m.k + 1] = [f] if len(m.text) % 2 else [f, "x", "y", "z"]
    elif m.how == "header":
        rows[0] = m.header
    elif m.how == "duplicate":
        rows.append(list(row))
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    data = buf.getvalue()
    if m.how == "quote":
        data = data.replace(f"{f},", f'"{f},', 1)
    elif m.how == "not-utf8":  # "\udcff" is written as the byte 0xff
        data = data.replace(label, label.replace(" ", "\udcff ", 1))
    elif m.how == "nul":
        data = data.replace(label, label.replace(" ", "\x00 ", 1))
    elif m.how == "bom":
        data = "\ufeff" + data
    path.write_bytes(data.encode("utf-8", "surrogateescape"))
    return path
