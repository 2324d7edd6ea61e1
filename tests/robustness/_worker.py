"""Runs the seeded mutants of one dataset kind and prints one JSON line per mutant:
`python -m tests.robustness._worker KIND WORKDIR SEED COUNT`.

Each mutant is a mutated copy of the clean dataset, then:
  open     `open_dataset`
  getitem  `ds[i]` for every sample, compared with the clean dataset's
  skip     one epoch through a Pipeline (cpu backend, on_error="skip"), every delivered sample
           compared with what the clean dataset delivers for the same index
  raise    the same with on_error="raise"
  info     `chute info` through the CLI (an error must be one line)
  verify   `chute verify` through the CLI
A stage ends as "correct", "substituted" (a counted substitute), "named" (a chute error),
"wrong" (a delivered sample differs), "raw" (any other exception), or "n/a" (the mutated
manifest declares none of the requested fields as before, so there is nothing to compare).
A watchdog thread ends the process when one mutant runs longer than LIMIT seconds, after
printing a "hang" line and every thread's stack."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

LIMIT = 30.0  # seconds one mutant may take (all stages)
BATCH = 5


def _named(exc: BaseException) -> str:
    from chute.errors import ChuteError

    kind = "named" if isinstance(exc, ChuteError) else "raw"
    return kind, f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"


def _row(batch: dict, row: int) -> dict:
    out = {}
    for key, value in batch.items():
        if key == "index":
            continue
        if isinstance(value, list):
            out[key] = value[row]
            continue
        value = value[row].numpy()
        lengths = batch.get(f"{key}_lengths")
        out[key] = value[: int(lengths[row])] if lengths is not None else value
    return out


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def _epoch(root: Path, kw: dict, on_error: str):
    """{index: sample} of one epoch, the number delivered, the failures counted (substituted
    in train, left out in eval) and the ids eval left out."""
    from chute import Pipeline

    pipe = Pipeline(str(root), BATCH, drop_last=False, on_error=on_error, **kw)
    try:
        samples, delivered = {}, 0
        for batch in pipe:
            for row, i in enumerate(batch["index"].tolist()):
                delivered += 1
                samples.setdefault(i, []).append(_row(batch, row))
        return samples, delivered, pipe.stats.decode_errors, list(pipe.stats.skipped)
    finally:
        pipe.close()


def _present(root: Path, clean_specs: dict, kw: dict) -> dict:
    """`kw` asking only for the fields the (mutated) manifest still declares as before: a
    manifest without a field (or whose field lost its media, which is what decides how a
    Pipeline delivers it) is a dataset without it, and the others must still be delivered
    correctly."""
    from chute.readers import open_dataset

    try:
        specs = open_dataset(root).specs
    except Exception:
        return kw  # the Pipeline meets the same error

    def same(f):
        return f in specs and all(specs[f].get(k) == clean_specs[f].get(k)
                                  for k in ("kind", "media"))

    kw = dict(kw)
    kw["fields"] = {f: options for f, options in kw["fields"].items() if same(f)}
    return kw


def _subset(row: dict, reference: dict) -> bool:
    return row.keys() <= reference.keys() and _same(row, {k: reference[k] for k in row})


def _stage_pipeline(root: Path, kw: dict, reference: dict, on_error: str, specs: dict):
    kw = _present(root, specs, kw)
    if not kw["fields"]:
        return "n/a", "the manifest no longer declares any requested field as before"
    try:
        samples, delivered, substituted, skipped = _epoch(root, kw, on_error)
    except Exception as exc:
        return _named(exc)
    wrong = sorted(i for i, rows in samples.items()
                   if i not in reference or not all(_subset(r, reference[i]) for r in rows))
    # eval delivers each sample at most once: a failed one is left out (and named), not
    # replaced by a sample the epoch delivers anyway
    twice = sorted(i for i, rows in samples.items() if len(rows) > 1)
    lost = sorted(set(reference) - set(samples) - set(skipped))
    if wrong or twice or lost or delivered + len(skipped) != len(reference):
        return "wrong", (f"indices {wrong[:8]}, twice {twice[:8]}, lost {lost[:8]}, "
                         f"{delivered} of {len(reference)} delivered, {len(skipped)} left out")
    return ("substituted", f"{substituted} substitutes") if substituted else ("correct", "")


def _stage_getitem(root: Path, clean) -> tuple[str, str]:
    from chute.readers import open_dataset

    try:
        ds = open_dataset(root)
        values = [ds[i] for i in range(len(ds))]
    except Exception as exc:
        return _named(exc)
    wrong = [i for i, v in enumerate(values) if i >= len(clean) or not _subset(_plain(v),
                                                                                clean[i])]
    if wrong or len(values) != len(clean):
        return "wrong", f"indices {wrong[:8]}, {len(values)} of {len(clean)} samples"
    return "correct", ""


def _stage_open(root: Path):
    from chute.readers import open_dataset

    try:
        open_dataset(root).close()
    except Exception as exc:
        return _named(exc)
    return "correct", ""


def _stage_info(root: Path):
    from chute.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["info", str(root)])
    except Exception as exc:
        return _named(exc)
    if code and err.getvalue().count("\n") != 1:
        return "raw", f"not one line: {err.getvalue()[-240:]}"
    return ("named" if code else "correct"), err.getvalue().strip()[:240]


def _stage_verify(root: Path):
    from chute.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["verify", str(root), "--no-progress"])
    except Exception as exc:
        return _named(exc)
    if "Traceback" in err.getvalue():
        return "raw", err.getvalue()[-240:]
    return ("flagged" if code else "clean"), err.getvalue().strip().split("\n")[0][:240]


class _Watchdog(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.current = None
        self.started = 0.0

    def run(self):
        while True:
            time.sleep(0.5)
            current = self.current
            if current is not None and time.monotonic() - self.started > LIMIT:
                print(json.dumps({"mutant": current, "hang": f"over {LIMIT} s"}), flush=True)
                faulthandler.dump_traceback(all_threads=True)
                os._exit(3)


def _plain(sample: dict) -> dict:
    return {k: np.asarray(v) if not isinstance(v, (dict, list, str)) else v
            for k, v in sample.items()}


def main(kind: str, work: Path, seed: int, count: int) -> int:
    from chute.readers import open_dataset
    from tests.robustness._build import DATASETS
    from tests.robustness._mutate import mutants

    warnings.simplefilter("ignore")
    build, kw = DATASETS[kind]
    clean_root = build(work / "clean")
    reference = {i: rows[0] for i, rows in _epoch(clean_root, kw, "raise")[0].items()}
    clean_ds = open_dataset(clean_root)
    clean = [_plain(clean_ds[i]) for i in range(len(clean_ds))]
    specs = clean_ds.specs
    clean_ds.close()
    dog = _Watchdog()
    dog.start()
    for name, apply in mutants(clean_root, seed, count):
        dog.current, dog.started = name, time.monotonic()
        folder = work / "mutant"
        root = folder / "d"
        shutil.copytree(clean_root, root, symlinks=True)
        record = {"mutant": name}
        try:
            apply(root)
        except Exception as exc:  # a mutation that does not apply to this dataset
            record["skipped"] = f"{type(exc).__name__}: {exc}"
        else:
            record["open"] = _stage_open(root)
            record["getitem"] = _stage_getitem(root, clean)
            record["skip"] = _stage_pipeline(root, kw, reference, "skip", specs)
            record["raise"] = _stage_pipeline(root, kw, reference, "raise", specs)
            record["info"] = _stage_info(root)
            record["verify"] = _stage_verify(root)
        dog.current = None
        print(json.dumps(record), flush=True)
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
