"""Seeded mutants of an inference config (issue 26 item 16; `_infer_mutants.py`), each loaded
with `load_config` and run through `chute infer-bench` (up to its dataset, which is missing, so
no replica starts), in this process under a per-mutant alarm.

Every outcome must be a one-line chute error naming the config file, or a config that keeps
the guards (docs/inference.md, "A config is code"): no "file.py" outside the config's folder,
replicas within the machine's cap, every key of its documented type. The suite fails on a raw
exception, a hang (over LIMIT_S), a bad config accepted ("wrong") or a file imported while
loading. `pytest -s` prints the counts by outcome; CHUTE_ROBUSTNESS_SEED explores another
seed."""

import contextlib
import io
import math
import os
from collections import Counter

import pytest

from chute.cli import main
from chute.errors import ChuteError
from chute.infer import load_config
from chute.infer._config import max_replicas
from tests.robustness._alarm import Hang, alarm
from tests.robustness._infer_mutants import mutants, outside_spec, write_clean

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = 200
LIMIT_S = 10


def _bad_values(config) -> list[str]:
    """Keys of the loaded config that are not of their documented type."""
    bad = []
    for s in config.stages:
        checks = {
            "name": isinstance(s.name, str) and s.name != "",
            "fn": isinstance(s.fn, str) and ":" in s.fn,
            "options": s.options is None or isinstance(s.options, dict),
            "replicas": type(s.replicas) is int and 1 <= s.replicas <= max_replicas(),
            "devices": isinstance(s.devices, list)
            and s.devices != []
            and all(isinstance(d, str) for d in s.devices),
            "max_batch": type(s.max_batch) is int and s.max_batch >= 1,
            "max_wait_ms": type(s.max_wait_ms) in (int, float)
            and math.isfinite(s.max_wait_ms)
            and s.max_wait_ms >= 0,
            "queue_size": type(s.queue_size) is int and s.queue_size >= 1,
            "threads": s.threads is None or (type(s.threads) is int and s.threads >= 1),
        }
        bad += [f"{s.name!r}.{key}={getattr(s, key)!r:.40}" for key, ok in checks.items() if not ok]
    if config.dataset is not None and not isinstance(config.dataset, str):
        bad.append(f"dataset={config.dataset!r:.40}")
    return bad


def _load(path) -> tuple[str, str]:
    try:
        config = load_config(path)
    except ChuteError as exc:
        message = str(exc)
        if "\n" in message or str(path) not in message:
            return "raw", f"not one line naming the config: {message[:200]!r}"
        return "named", message[:160]
    except Hang:
        raise
    except Exception as exc:
        return "raw", f"{type(exc).__name__}: {str(exc)[:200]}"
    if outside_spec(path):
        return "wrong", "accepted a file.py spec outside the config's folder"
    bad = _bad_values(config)
    return ("wrong", f"accepted {bad}") if bad else ("accepted", "")


def _cli(path, missing) -> tuple[str, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["infer-bench", str(path), str(missing), "--no-progress"])
    except Hang:
        raise
    except BaseException as exc:  # SystemExit included: argparse is not reached here
        return "raw", f"{type(exc).__name__}: {str(exc)[:200]}"
    text = err.getvalue()
    if code != 1 or "Traceback" in text or len(text.strip().splitlines()) != 1:
        return "raw", f"exit {code}, stderr {text[-300:]!r}"
    return "named", ""


@pytest.mark.slow
def test_inference_config_mutants(tmp_path):
    totals: Counter = Counter()
    failures = []
    for k, (name, apply) in enumerate(mutants(SEED, COUNT)):
        folder = tmp_path / str(k) / "cfg"
        write_clean(folder)
        try:
            with alarm(LIMIT_S):
                path = apply(folder)
                outcome, detail = _load(path)
                if outcome in ("named", "accepted"):
                    cli, cli_detail = _cli(path, tmp_path / "no-dataset")
                    if cli == "raw":
                        outcome, detail = "raw", f"chute infer-bench: {cli_detail}"
        except Hang as exc:
            outcome, detail = "hang", str(exc)
        if (folder.parent / "ran").exists():
            outcome, detail = "wrong", "a file was imported while loading the config"
        totals[outcome] += 1
        if outcome in ("raw", "hang", "wrong"):
            failures.append(f"{name}: {outcome}: {detail}")
    print(f"\ninference configs: {sum(totals.values())} mutants, {dict(sorted(totals.items()))}")
    assert not failures, "\n".join(failures)
    assert totals["named"] and totals["accepted"]  # the mutants reach both ends
