"""Running one `chute convert` of a mutant in-process and naming its outcome, shared by the
robustness suites: "raw" (a traceback, an exception, or not one line with exit 1), "half" (a
failed convert left samples in its destination), "refused" (one line, exit 1) or "stored"."""

from __future__ import annotations

import contextlib
import io
import os

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
