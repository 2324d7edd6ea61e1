"""The permanent robustness suite (issue 11): seeded mutants of small generated datasets
(manifest, indexes, columns, payloads, files; `_mutate.py`) are opened, read sample by sample,
iterated through a Pipeline with on_error="skip" and "raise", shown with `chute info` and
verified with `chute verify`
(`_worker.py`, in a subprocess with a per-mutant watchdog).

Every outcome must be a named chute error, a counted substitute or a correct sample. The
suite fails on a raw exception, a hang, a crash, and on a wrong sample that `chute verify`
does not flag. A sample whose bytes changed while the file kept its size is read as stored:
only a checksum can tell (docs/design.md, "Shard format": open checks sizes and structure,
`chute verify` every checksum), so such a sample is allowed only when verify flags the dataset.
The counts by outcome are printed (`pytest -s` shows them)."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.robustness._build import DATASETS

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261123"))  # another seed explores more
COUNT = {"image": 100, "ndarray": 100, "audio": 50, "video": 50}
STAGES = ("open", "getitem", "skip", "raise", "info", "verify")


def _verdict(record: dict) -> tuple[str, str | None]:
    """(outcome, failure or None) of one mutant's record."""
    if "hang" in record:
        return "hang", f"hang: {record['hang']}"
    if "skipped" in record:
        return "not applicable", None
    raw = [s for s in STAGES if record[s][0] == "raw"]
    if raw:
        return "raw", f"raw exception in {raw[0]}: {record[raw[0]][1]}"
    wrong = [s for s in STAGES if record[s][0] == "wrong"]
    if wrong:
        if record["verify"][0] != "flagged":
            return "wrong", f"wrong sample in {wrong[0]} ({record[wrong[0]][1]}) and verify " \
                            "does not flag the dataset"
        return "changed bytes, flagged by verify", None
    # the default way to read: a Pipeline with on_error="skip"
    return {"named": "named error", "substituted": "counted substitute",
            "n/a": "no requested field left"}.get(record["skip"][0], "correct"), None


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """One worker per dataset kind, all started at once (they share the cores)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = {kind: subprocess.Popen(
        [sys.executable, "-m", "tests.robustness._worker", kind,
         str(tmp_path_factory.mktemp(f"robust-{kind}")), str(SEED), str(COUNT[kind])],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for kind in sorted(DATASETS)}
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("kind", sorted(DATASETS))
def test_mutants(kind, workers):
    proc = workers[kind]
    try:
        stdout, stderr = proc.communicate(timeout=170)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        code = "timeout"
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    totals, stages, failures = Counter(), Counter(), []
    for record in records:
        outcome, failure = _verdict(record)
        totals[outcome] += 1
        for stage in STAGES:
            if stage in record:
                stages[f"{stage}:{record[stage][0]}"] += 1
        if failure:
            failures.append(f"{record['mutant']}: {failure}")
    print(f"\n{kind}: {len(records)} mutants, by outcome {dict(sorted(totals.items()))}")
    print(f"{kind}: by stage {dict(sorted(stages.items()))}")
    if code != 0 and not failures:
        last = records[-1]["mutant"] if records else "before the first mutant"
        failures.append(f"worker exited with {code} after {last}: {stderr[-2000:]}")
    assert not failures, "\n".join(failures)
    assert len(records) == COUNT[kind]
    assert totals["correct"] and totals["named error"]  # the mutants reach both ends
