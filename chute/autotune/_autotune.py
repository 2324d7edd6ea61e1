"""Entry points over the cache: `autotune()` (measure, decide, store) and `stored_decision()`
(a decision stored earlier for this machine + dataset + parameters, if it still applies).

Both take what they compare from the caller: the candidates, and for `autotune` the runner that
opens a batch source per candidate. Composing them with real backends is the caller's business
(for chute, chute/pipelines/producers/image/_auto.py).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable

from chute.autotune._cache import load_record, store_record
from chute.autotune._candidate import CandidateLike
from chute.autotune._fingerprint import TuneParams, decision_key, machine_fingerprint
from chute.autotune._identity import dataset_identity
from chute.autotune._report import decision_json
from chute.autotune._tune import Runner, tune

__all__ = ["autotune", "stored_decision", "DEFAULT_BUDGET"]

log = logging.getLogger("chute.autotune")

DEFAULT_BUDGET = 60.0  # seconds: `chute autotune`, which is run on purpose and may take a while


def autotune(
    dataset,
    params: TuneParams,
    *,
    candidates: Iterable[CandidateLike],
    runner: Runner,
    budget: float = DEFAULT_BUDGET,
    use_cache: bool = True,
    progress: bool = False,
    **tune_kw,
) -> dict:
    """Measure `candidates` on `dataset` at `params`, decide, store the decision, return it.

    Args:
        dataset: the dataset's identity: a `DatasetIdentity` or an object with `.path` and
            `.fingerprint` (it is not opened here; `runner` reads it).
        params: the batch shape the decision is for.
        candidates: what to compare (see `CandidateLike`); unavailable ones are listed only.
        runner: opens a batch source for one candidate (see `tune`).
        budget: total seconds for all measurements.
        use_cache: store the decision for `stored_decision` (False: store nothing).
        progress: show a progress bar on stderr.
        **tune_kw: passed to `tune` (window, tie_tolerance, clock, ...).

    Returns:
        The `--json` object documented in chute/autotune/_report.py.
    """
    ds = dataset_identity(dataset)
    machine = machine_fingerprint()
    key = decision_key(machine, ds.fingerprint, params)
    decision = tune(candidates, runner, budget=budget, device=params.device,
                    progress=progress, **tune_kw)
    result = decision_json(decision, key)
    if use_cache:
        store_record({
            **result,
            "machine": machine,
            "dataset": {"path": ds.path, "fingerprint": ds.fingerprint},
            "params": params.as_dict(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        })
    log.info("autotune %s: %s %s (%s)", key, result["choice"], result["backend_options"],
             result["reason"])
    return result


def _choice_on_offer(record: dict, candidates: Iterable[CandidateLike]) -> bool:
    names = {c.name for c in candidates if c.available}
    return any(c["name"] in names for c in record["candidates"]
               if c["backend"] == record["choice"] and c["params"] == record["backend_options"])


def stored_decision(
    dataset, params: TuneParams, candidates: Iterable[CandidateLike]
) -> dict | None:
    """The decision `autotune` stored for this machine, `dataset` and `params`, or None.

    A stored winner that is no longer among the available `candidates` (a backend uninstalled,
    a grid changed) does not count: its options could not be honoured.

    Args:
        dataset: the dataset's identity (see `autotune`).
        params: the batch shape.
        candidates: what this machine offers now.

    Returns:
        The stored record (the `--json` object plus "machine", "dataset", "params", "created"),
        or None when there is none, it is unreadable, or its winner is not on offer.
    """
    ds = dataset_identity(dataset)
    record = load_record(decision_key(machine_fingerprint(), ds.fingerprint, params))
    if record is None or not _choice_on_offer(record, candidates):
        return None
    return record
