"""Seeded mutants of a video CSV and its containers (issue 26 item 16; `_video_mutants.py`),
converted with `chute convert video` and read back through a Pipeline (on_error="skip"), in
this process under a per-mutant alarm.

A mutant passes when the convert either stores a dataset in which every sample is the bytes of
a file of the source folder, byte for byte, and every video the mutation did not touch is
stored once with its own text and frame count (or skipped and listed in the report), and the
Pipeline delivers each untouched video's frames as it does from the clean dataset; or exits 1
with one line and leaves no dataset. Nothing may be written outside the destination. It fails
on a raw exception, a hang (over LIMIT_S), a wrong sample, an untouched video lost, a
half-written destination or a file written elsewhere. `pytest -s` prints the counts;
CHUTE_ROBUSTNESS_SEED explores another seed, CHUTE_ROBUSTNESS_VIDEO sets the count."""

import json
import os
from collections import Counter

import numpy as np
import pytest

from chute import Pipeline, VideoOptions
from chute.cli import main
from chute.errors import ChuteError
from tests.robustness._alarm import Hang, alarm
from tests.robustness._cli import convert_outcome, match_samples, stored_outcome
from tests.robustness._video_mutants import FILES, mutants, write_source

pytest.importorskip("av")

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = int(os.environ.get("CHUTE_ROBUSTNESS_VIDEO", "20"))
LIMIT_S = 30
FAILURES = ("raw", "hang", "wrong", "lost", "half", "escape")
FIELDS = {"video": VideoOptions(num_frames=4, frame_interval=2, size=(16, 16)), "meta": None}


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root)
            for f in files + dirs}


def _frames(dst) -> dict[str, list[np.ndarray]]:
    """key -> the clips a Pipeline delivers for it (eval: the same ones every epoch)."""
    pipe = Pipeline(str(dst), 2, drop_last=False, on_error="skip", augment="eval",
                    fields=FIELDS)
    found: dict[str, list[np.ndarray]] = {}
    try:
        for batch in pipe:
            for row, meta in enumerate(batch["meta"]):
                found.setdefault(meta["key"], []).append(batch["video"][row].numpy())
    finally:
        pipe.close()
    return found


def _check(dst, source, touched: set[str], reference: dict) -> tuple[str, str]:
    """The outcome of a convert that exited 0."""
    def check(i: int, name: str, sample: dict) -> str | None:
        k = FILES.index(name)
        meta = json.dumps(sample["meta"])
        if sample["meta"].get("key") != name or sample["text"] != f"clip {k}" or \
                int(sample["num_frames"]) != 8 + 3 * k:
            return f"sample {i} ({name}): {meta[:160]}, {int(sample['num_frames'])} frames"
        return None

    current = {f: (source / f).read_bytes() for f in FILES}
    seen, wrong = match_samples(dst, "video", current, touched, check,
                                ("file of the source folder", "videos"))
    if wrong is not None:
        return wrong
    untouched = set(FILES) - touched
    try:
        clips = _frames(dst)
    except ChuteError as exc:
        if "\n" in str(exc).strip():
            return "raw", f"Pipeline: not one line: {str(exc)[:200]!r}"
        return "read refused", str(exc)[:160]
    except Hang:
        raise
    except Exception as exc:
        return "raw", f"Pipeline: {type(exc).__name__}: {str(exc)[:200]}"
    for f in untouched & set(clips):
        if len(clips[f]) != 1 or not np.array_equal(clips[f][0], reference[f]):
            return "wrong", f"the Pipeline delivers other frames for {f}"
    lost = sorted(f for f in untouched if not seen[f] or f not in clips)
    return stored_outcome(dst, lost, all(seen[f] for f in FILES),
                          "videos not stored (or not read)")


def _convert(listing, dst) -> tuple[str, str]:
    return convert_outcome(["convert", "video", str(listing), str(dst), "--workers", "1",
                            "--no-progress", "--shard-size", "8KB"], dst)


@pytest.mark.slow
def test_video_csv_and_container_mutants(tmp_path):
    clean = write_source(tmp_path / "clean")
    assert main(["convert", "video", str(clean), str(tmp_path / "clean.chute"), "--workers",
                 "1", "--no-progress"]) == 0
    reference = {f: clips[0] for f, clips in _frames(tmp_path / "clean.chute").items()}
    assert sorted(reference) == sorted(FILES)
    totals: Counter = Counter()
    failures = []
    for name, apply in mutants(SEED, COUNT):
        work = tmp_path / name.split()[0]
        source = work / "src"
        write_source(source)
        listing, touched = apply(source)
        before = _files(work)
        dst = work / "d.chute"
        try:
            with alarm(LIMIT_S):
                outcome, detail = _convert(listing, dst)
                if outcome == "stored":
                    outcome, detail = _check(dst, source, touched, reference)
        except Hang as exc:
            outcome, detail = "hang", str(exc)
        leaked = sorted(f for f in _files(work) - before if f != "d.chute" and
                        not f.startswith("d.chute" + os.sep))
        if leaked:
            outcome, detail = "escape", f"written outside the destination: {leaked[:5]}"
        totals[outcome] += 1
        if outcome in FAILURES:
            failures.append(f"{name}: {outcome}: {detail}")
        if os.environ.get("CHUTE_ROBUSTNESS_SHOW") and outcome != "stored whole":
            print(f"{name}: {outcome}: {detail}")
    print(f"\nvideo CSVs and containers: {sum(totals.values())} mutants, "
          f"{dict(sorted(totals.items()))}")
    assert not failures, "\n".join(failures)
    assert totals["stored whole"] and (totals["refused"] or totals["stored, touched skipped"])
