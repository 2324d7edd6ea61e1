"""Seeded mutants of a WebDataset tar (issue 26 item 16; `_tar_mutants.py`) converted with
`chute convert webdataset`, in this process under a per-mutant alarm.

A mutant passes when the convert either stores a dataset whose every sample is one of the
tar's samples, image and label together, with every sample the mutation did not touch stored,
or exits 1 with one line and leaves no destination; in both cases nothing is written outside
the destination (a member name is a key, never a path). It fails on a raw exception, a hang
(over LIMIT_S), a wrong sample, an untouched sample lost, a half-written destination or a
file written elsewhere. `pytest -s` prints the counts; CHUTE_ROBUSTNESS_SEED explores
another seed."""

import json
import os
from collections import Counter

import pytest

from chute.readers import open_dataset
from tests.robustness._alarm import Hang, alarm
from tests.robustness._cli import failed_outcome, run
from tests.robustness._tar_mutants import ALL, N, image, mutants

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = 80
LIMIT_S = 20


def _files(root) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, dirs, files in os.walk(root)
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]
    }


def _stored(dst) -> tuple[set[int], list[str]]:
    """Sample indices the dataset holds, and its samples that are no sample of the tar."""
    pairs = {(image(k), k): k for k in range(N)}
    found, wrong = set(), []
    ds = open_dataset(dst)
    try:
        for i in range(len(ds)):
            sample = ds[i]
            pair = (bytes(sample["image"]), int(sample["label"]) if "label" in sample else None)
            if pair in pairs:
                found.add(pairs[pair])
            elif pair[1] is None and any(pair[0] == image(k) for k in range(N)):
                found.add(next(k for k in range(N) if pair[0] == image(k)))
            else:
                wrong.append(f"sample {i} (key {sample['meta'].get('key')!r}, label {pair[1]})")
    finally:
        ds.close()
    return found, wrong


def _listed(work, report, keys: list[int]) -> bool:
    """Whether every sample of `keys` is listed in the convert's report of skipped samples."""
    try:
        text = (work / report).read_text() if report else ""
    except OSError:
        return False
    return all(f"{k:03d}" in text for k in keys)


def _convert(work) -> tuple[str, str]:
    tar, dst = work / "in.tar", work / "out" / "d.chute"
    code, out, text, raw = run(
        ["convert", "webdataset", str(tar), str(dst), "--no-progress", "--json"]
    )
    if raw is not None:
        return raw
    report = None
    if code == 0:
        report = json.loads(out).get("report")
    extra = _files(work) - {"in.tar"} - {f for f in _files(work) if f.startswith("out/d.chute/")}
    extra -= {os.path.relpath(report, work)} if report else set()
    if extra:
        return "escape", f"files written outside the destination: {sorted(extra)[:5]}"
    if code != 0:
        return failed_outcome(code, text, dst, refused="named")
    return "stored", report or ""


@pytest.mark.slow
def test_webdataset_tar_mutants(tmp_path):
    totals: Counter = Counter()
    failures = []
    for k, (name, build) in enumerate(mutants(SEED, COUNT)):
        work = tmp_path / str(k)
        work.mkdir()
        touched = build(work / "in.tar")
        try:
            with alarm(LIMIT_S):
                outcome, detail = _convert(work)
                if outcome == "stored":
                    found, wrong = _stored(work / "out" / "d.chute")
                    lost = sorted(ALL - touched - found)
                    if wrong:
                        outcome, detail = "wrong", f"not a sample of the tar: {wrong[:3]}"
                    elif lost and _listed(work, detail, lost):
                        outcome = "untouched skipped, listed"
                    elif lost:
                        outcome, detail = "lost", f"untouched samples not stored: {lost}"
                    elif found != ALL:
                        outcome = "stored, touched skipped"
        except Hang as exc:
            outcome, detail = "hang", str(exc)
        if outcome == "named" and touched != ALL:
            outcome = "refused whole tar"
        totals[outcome] += 1
        if outcome in ("raw", "hang", "wrong", "lost", "half", "escape"):
            failures.append(f"{name}: {outcome}: {detail}")
    print(f"\nwebdataset tars: {sum(totals.values())} mutants, {dict(sorted(totals.items()))}")
    assert not failures, "\n".join(failures)
    assert totals["stored"] and totals["named"]  # the mutants reach both ends
