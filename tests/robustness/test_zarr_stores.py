"""Seeded mutants of a zarr group (issue 26 item 16; `_zarr_mutants.py`) opened with
`open_dataset` and read row by row and in one batch (with a status per row), checked with
`chute verify` and converted with `chute convert zarr`, in this process under a per-mutant
alarm.

A row is "correct" (the clean store's row), "as stored" (what the zarr library reads from the
mutated store: zarr keeps no checksums, so an edited dtype or a flipped byte in an
uncompressed chunk is data as stored; docs/design.md, "Zarr groups") or a one-line chute
error. The suite fails on a raw exception, a hang (over LIMIT_S), a row that is neither
("wrong"), a row read from the store beside it ("escape": a symlink leading out), a verify
that passes a store whose rows fail, a convert that exits 0 with rows that differ from the
direct read or leaves a destination after failing, and a file written outside the
destination. `pytest -s` prints the counts; CHUTE_ROBUSTNESS_SEED explores another seed,
CHUTE_ROBUSTNESS_ZARR sets the count."""

import contextlib
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute.errors import ChuteError
from chute.readers import open_dataset
from tests.robustness._alarm import Hang, alarm
from tests.robustness._cli import run
from tests.robustness._zarr_mutants import CLEAN, OTHER, S, build, mutants

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = int(os.environ.get("CHUTE_ROBUSTNESS_ZARR", "30"))
LIMIT_S = 20
FAILURES = ("raw", "hang", "wrong", "escape", "verify missed", "half", "lost")


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype.kind not in "iufb" or b.dtype.kind not in "iufb":
        return False
    return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True))


def _judge(store: Path, field: str, row: int, value) -> str:
    """ "correct", "as stored", "escape" or "wrong" for one delivered row."""
    if field in CLEAN and row < S and _same(value, CLEAN[field][row]):
        return "correct"
    if field in OTHER and row < S and _same(value, OTHER[field][row]):
        return "escape"
    try:
        import zarr

        stored = zarr.open_group(str(store), mode="r")[field][row]
    except Hang:
        raise
    except Exception:  # zarr cannot read it: nothing to compare with
        return "wrong"
    return "as stored" if _same(value, stored) else "wrong"


def _one_line(exc: BaseException) -> tuple[str, str]:
    message = str(exc)
    if "\n" in message.strip() or not message:
        return "raw", f"not one line: {message[:200]!r}"
    return "named", message[:160]


def _attempt(what: str, read: Callable[[], Any]) -> tuple[Any, tuple[str, str] | None]:
    """(what `read()` returns, None), or (None, ("named" or "raw", detail)) when it raised:
    a one-line chute error is "named", anything else "raw"; a `Hang` goes through."""
    try:
        return read(), None
    except ChuteError as exc:
        outcome, detail = _one_line(exc)
        return None, (outcome, f"{what}: {detail}")
    except Hang:
        raise
    except Exception as exc:
        return None, ("raw", f"{what}: {type(exc).__name__}: {str(exc)[:200]}")


def _direct(store: Path) -> tuple[str, str, dict]:
    """(outcome, detail, row outcomes) of reading the store directly."""
    try:
        ds = open_dataset(store)
    except ChuteError as exc:
        return (*_one_line(exc), {})
    except Hang:
        raise
    except Exception as exc:
        return "raw", f"open: {type(exc).__name__}: {str(exc)[:200]}", {}
    rows: Counter = Counter()
    n = min(len(ds), S + 4)  # a length claimed by metadata may be huge: its start is enough
    per_sample = [f for f, kind in ds.fields.items() if kind != "table"]
    for i in range(n):
        sample, failed = _attempt(f"row {i}", lambda i=i: ds[i])
        if failed is not None:
            if failed[0] == "raw":
                return (*failed, rows)
            rows["named"] += 1
            continue
        for field, value in sample.items():
            rows[_judge(store, field, i, value)] += 1
    for field in per_sample:  # the batched path (the Pipeline's), failed rows under a status
        status = np.zeros(n, np.uint8)
        batch, failed = _attempt(
            f"batch {field}",
            lambda f=field, s=status: ds.reader(f).read(np.arange(n, dtype=np.int64), status=s),
        )
        if failed is not None:
            if failed[0] == "raw":
                return (*failed, rows)
            rows["named"] += 1
            continue
        for i in np.flatnonzero(status == 0):
            rows[_judge(store, field, int(i), batch[i])] += 1
        rows["named"] += int(np.count_nonzero(status))
    for bad in ("escape", "wrong"):
        if rows[bad]:
            return bad, f"{rows[bad]} row(s) {dict(rows)}", rows
    return (
        ("read, rows failed" if rows["named"] else "as stored" if rows["as stored"] else "correct"),
        "",
        rows,
    )


def _verify(store: Path) -> tuple[str, str]:
    code, _, err, raw = run(["verify", str(store), "--no-progress"])
    if raw is not None:
        return "raw", f"chute verify: {raw[1]}"
    if code not in (0, 1):
        return "raw", f"chute verify: exit {code}, {err[-300:]!r}"
    return ("passed" if code == 0 else "flagged"), err.strip()[:160]


def _convert(store: Path, dst: Path) -> tuple[str, str]:
    code, _, err, raw = run(["convert", "zarr", str(store), str(dst)])
    if raw is not None:
        return "raw", f"convert zarr: {raw[1]}"
    if code == 1:
        if len(err.strip().splitlines()) != 1:
            return "raw", f"convert zarr: not one line: {err[-300:]!r}"
        if os.path.lexists(dst):
            return "half", f"convert zarr failed and left {dst}"
        return "refused", err.strip()[:160]
    if code != 0:
        return "raw", f"convert zarr: exit {code}, {err[-300:]!r}"
    try:
        ds = open_dataset(dst)
    except ChuteError as exc:
        return "half", f"convert zarr exited 0 and its dataset does not open: {exc}"
    rows: Counter = Counter()
    with contextlib.closing(ds):
        for i in range(len(ds)):
            for field, value in ds[i].items():
                rows[_judge(store, field, i, value)] += 1
    for bad in ("escape", "wrong"):
        if rows[bad]:
            return bad, f"convert zarr stored {rows[bad]} such row(s)"
    return "stored", ""


def _files(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, dirs, files in os.walk(root)
        for f in files + dirs
    }


def _outside(work: Path, before: set[str]) -> list[str]:
    dst = os.path.join("out", "d.chute")
    return sorted(f for f in _files(work) - before if f != dst and not f.startswith(dst + os.sep))


@pytest.mark.slow
def test_zarr_store_mutants(tmp_path):
    totals: Counter = Counter()
    by_tool: Counter = Counter()
    failures = []
    for name, layout, apply in mutants(SEED, COUNT):
        work = tmp_path / name.split()[0]
        store = build(work, layout)
        (work / "out").mkdir()
        apply(store)
        before = _files(work)
        try:
            with alarm(LIMIT_S):
                outcome, detail, rows = _direct(store)
                verify, verify_detail = _verify(store)
                convert, convert_detail = _convert(store, work / "out" / "d.chute")
        except Hang as exc:
            outcome, detail, verify, convert, rows = "hang", str(exc), "-", "-", {}
        if outcome not in FAILURES:
            if verify == "raw":
                outcome, detail = "raw", verify_detail
            elif convert in FAILURES:
                outcome, detail = convert, convert_detail
            elif verify == "passed" and rows and rows.get("named"):
                outcome, detail = "verify missed", "rows fail to read and verify passes"
        leaked = _outside(work, before)
        if leaked:
            outcome, detail = "escape", f"written outside the destination: {leaked[:5]}"
        totals[outcome] += 1
        by_tool[f"verify {verify}"] += 1
        by_tool[f"convert {convert}"] += 1
        if outcome in FAILURES:
            failures.append(f"{name}: {outcome}: {detail}")
    print(
        f"\nzarr stores: {sum(totals.values())} mutants, {dict(sorted(totals.items()))}, "
        f"{dict(sorted(by_tool.items()))}"
    )
    assert not failures, "\n".join(failures)
    assert totals["named"] and totals["correct"]  # the mutants reach both ends
