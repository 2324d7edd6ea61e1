"""Running one `chute convert` of a mutant in-process and naming its outcome, shared by the
robustness suites: "raw" (a traceback, an exception, or not one line with exit 1), "half" (a
failed convert left samples in its destination), "refused" (one line, exit 1) or "stored"."""

from __future__ import annotations

import contextlib
import io
import os
from collections import Counter
from collections.abc import Callable

from chute.cli import main
from chute.errors import ChuteError
from chute.readers import open_dataset
from tests.robustness._alarm import Hang


def holds_samples(dst) -> bool:
    """Whether a destination a failed convert left holds samples (one that stored none is
    left empty, with its list of skipped inputs: docs/cli.md)."""
    try:
        ds = open_dataset(dst)
    except ChuteError:
        return False
    with contextlib.closing(ds):
        return len(ds) > 0


def run(argv: list[str]) -> tuple[int | None, str, str, tuple[str, str] | None]:
    """(exit code, stdout, stderr, None), or (None, "", "", ("raw", why)) when `main` raised
    or printed a traceback; a `Hang` goes through."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except Hang:
        raise
    except BaseException as exc:
        return None, "", "", ("raw", f"{type(exc).__name__}: {str(exc)[:200]}")
    if "Traceback" in err.getvalue():
        return None, "", "", ("raw", err.getvalue()[-300:])
    return code, out.getvalue(), err.getvalue(), None


def failed_outcome(code: int, err: str, dst, refused: str = "refused") -> tuple[str, str]:
    """The outcome of a convert that exited `code` != 0 with stderr `err`."""
    if code != 1 or len(err.strip().splitlines()) != 1:
        return "raw", f"exit {code}, stderr {err[-300:]!r}"
    if os.path.lexists(dst) and holds_samples(dst):
        return "half", "a failed convert left samples in its destination"
    return refused, err.strip()[:160]


def convert_outcome(argv: list[str], dst) -> tuple[str, str]:
    """Run `chute` with `argv` (a convert into `dst`) and name the outcome."""
    code, _, err, raw = run(argv)
    if raw is not None:
        return raw
    if code != 0:
        return failed_outcome(code, err, dst)
    return "stored", ""


def match_samples(dst, field: str, sources: dict[str, bytes], touched: set[str],
                  check: Callable[[int, str, dict], str | None],
                  names: tuple[str, str]) -> tuple[Counter, tuple[str, str] | None]:
    """Match each sample of the dataset `dst` to the source file whose bytes its `field`
    holds, and count them: (how often each source was stored, None), or (the count so far,
    a "wrong" outcome) when a sample holds bytes of no source, `check(i, name, sample)` finds
    fault (a detail) with a sample of an untouched source, or an untouched source is stored
    twice.

    Args:
        dst: the destination a convert stored.
        field: the field that holds the source's bytes.
        sources: source file name -> its bytes.
        touched: the sources the mutation touched (not checked, may be stored twice).
        check: the test of one sample of an untouched source.
        names: what a source is and what the sources are, for the details
            ("listed recording", "recordings").
    """
    seen: Counter = Counter()
    ds = open_dataset(dst)
    try:
        for i in range(len(ds)):
            sample = ds[i]
            data = bytes(sample[field])
            name = next((f for f, b in sources.items() if b == data), None)
            if name is None:
                return seen, ("wrong", f"sample {i} holds bytes of no {names[0]}")
            seen[name] += 1
            if name in touched:
                continue
            wrong = check(i, name, sample)
            if wrong is not None:
                return seen, ("wrong", wrong)
    finally:
        ds.close()
    twice = sorted(f for f in set(sources) - touched if seen[f] > 1)
    if twice:
        return seen, ("wrong", f"untouched {names[1]} stored twice: {twice}")
    return seen, None


def stored_outcome(dst, lost: list[str], whole: bool, what: str) -> tuple[str, str]:
    """The outcome of a convert into `dst` that exited 0 and stored every sample right, but
    left out the untouched inputs `lost`: each must be listed in `dst/skipped.tsv`.

    Args:
        dst: the destination (a `pathlib.Path`).
        lost: the untouched inputs not stored (or not read back).
        whole: whether every input, touched or not, was stored.
        what: what `lost` holds, for the detail ("recordings not stored").
    """
    if lost:
        report = dst / "skipped.tsv"
        text = report.read_text(errors="replace") if report.is_file() else ""
        if all(f in text for f in lost):
            return "untouched skipped, listed", f"{lost}"
        return "lost", f"untouched {what} nor listed: {lost}"
    return ("stored whole" if whole else "stored, touched skipped"), ""
