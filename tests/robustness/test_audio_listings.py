"""Seeded mutants of an audio listing, JSONL and CSV (issue 26 item 16; `_audio_mutants.py`),
converted with `chute convert audio`, in this process under a per-mutant alarm.

A mutant passes when the convert either stores a dataset in which every sample is the bytes
of a listed recording, and every recording the mutation did not touch is stored once with its
own key, text and segments (or skipped and listed in the report), or exits 1 with one line and
leaves no dataset; in both cases nothing is written outside the destination and the source
folder is unchanged. A listed path may lead anywhere (listings name absolute paths: Kaldi's
wav.scp does), but only regular files are read. It fails on a raw exception, a hang (over
LIMIT_S), a wrong sample, an untouched recording lost, a half-written destination or a file
written elsewhere. `pytest -s` prints the counts; CHUTE_ROBUSTNESS_SEED explores another seed,
CHUTE_ROBUSTNESS_AUDIO sets the count."""

import json
import os
from collections import Counter

import pytest

from tests.robustness._alarm import Hang, alarm
from tests.robustness._audio_mutants import FILES, mutants, write_source
from tests.robustness._cli import convert_outcome, match_samples, stored_outcome

pytest.importorskip("soundfile")

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = int(os.environ.get("CHUTE_ROBUSTNESS_AUDIO", "40"))
LIMIT_S = 20
FAILURES = ("raw", "hang", "wrong", "lost", "half", "escape")


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root)
            for f in files + dirs}


def _check(dst, stored_bytes: dict, touched: set[str]) -> tuple[str, str]:
    """The outcome of a convert that exited 0."""
    def check(i: int, name: str, sample: dict) -> str | None:
        text = json.dumps(sample["meta"])
        others = [g for g in FILES if g != name and g in text]
        if others or sample["meta"].get("key") != name or f"all of {name}" not in text:
            return f"sample {i} ({name}) carries meta {text[:200]}"
        return None

    seen, wrong = match_samples(dst, "audio", stored_bytes, touched, check,
                                ("listed recording", "recordings"))
    if wrong is not None:
        return wrong
    untouched = set(FILES) - touched
    lost = sorted(f for f in untouched if not seen[f])
    return stored_outcome(dst, lost, all(seen[f] for f in FILES), "recordings not stored")


def _convert(listing, dst) -> tuple[str, str]:
    return convert_outcome(["convert", "audio", str(listing), str(dst), "--workers", "1",
                            "--no-progress"], dst)


def test_audio_listing_mutants(tmp_path):
    source = tmp_path / "src"
    write_source(source)
    stored_bytes = {f: (source / f).read_bytes() for f in FILES}
    totals: Counter = Counter()
    failures = []
    for name, build in mutants(SEED, COUNT):
        listing, touched = build(source)
        before = _files(source)
        work = tmp_path / name.split()[0]
        work.mkdir()
        dst = work / "d.chute"
        try:
            with alarm(LIMIT_S):
                outcome, detail = _convert(listing, dst)
                if outcome == "stored":
                    outcome, detail = _check(dst, stored_bytes, touched)
        except Hang as exc:
            outcome, detail = "hang", str(exc)
        leaked = sorted(f for f in _files(work) if f != "d.chute" and
                        not f.startswith("d.chute" + os.sep))
        if _files(source) != before or leaked:
            outcome, detail = "escape", f"written outside: {leaked[:5]} " \
                                        f"{sorted(_files(source) ^ before)[:5]}"
        totals[outcome] += 1
        if outcome in FAILURES:
            failures.append(f"{name}: {outcome}: {detail}")
        if os.environ.get("CHUTE_ROBUSTNESS_SHOW") and outcome not in ("stored whole",):
            print(f"{name}: {outcome}: {detail}")
        listing.unlink()
    print(f"\naudio listings: {sum(totals.values())} mutants, {dict(sorted(totals.items()))}")
    assert not failures, "\n".join(failures)
    assert totals["refused"] and (totals["stored whole"] or totals["stored, touched skipped"])
