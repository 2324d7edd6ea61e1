"""Entry points: `autotune()` (measure, decide, store) and `resolve_auto_backend()` (what
`Pipeline(backend="auto")` calls: cached decision, else cpu without a CUDA device, else a quick
tune that is stored)."""

from __future__ import annotations

import datetime
import logging

from chute.autotune._cache import load_record, store_record
from chute.autotune._candidates import dali_unavailable_reason, enumerate_candidates
from chute.autotune._fingerprint import TuneParams, decision_key, machine_fingerprint
from chute.autotune._report import decision_json
from chute.autotune._runner import pipeline_runner
from chute.autotune._tune import tune

__all__ = ["autotune", "resolve_auto_backend", "DEFAULT_BUDGET", "DEFAULT_AUTO_BUDGET"]

log = logging.getLogger("chute.autotune")

DEFAULT_BUDGET = 60.0  # seconds, `chute autotune`
DEFAULT_AUTO_BUDGET = 20.0  # seconds, the quick tune of Pipeline(backend="auto") on a GPU machine


def _open(dataset):
    if hasattr(dataset, "fingerprint"):
        return dataset
    from chute.readers import open_dataset

    return open_dataset(dataset)


def _key(ds, params: TuneParams) -> tuple[str, dict]:
    machine = machine_fingerprint()
    return decision_key(machine, ds.fingerprint, params), machine


def autotune(
    dataset,
    params: TuneParams,
    *,
    budget: float = DEFAULT_BUDGET,
    use_cache: bool = True,
    progress: bool = False,
    candidates=None,
    runner=None,
    **tune_kw,
) -> dict:
    """Measure the candidates on `dataset` at `params`, decide, store the decision (unless
    use_cache is False) and return it as the `--json` object (see chute.autotune._report).

    `candidates` and `runner` default to every backend of this machine run through a Pipeline;
    tests pass their own."""
    ds = _open(dataset)
    key, machine = _key(ds, params)
    if candidates is None:
        candidates = enumerate_candidates(params.device)
    if runner is None:
        runner = pipeline_runner(ds, params)
    decision = tune(candidates, runner, budget=budget, device=params.device,
                    progress=progress, **tune_kw)
    result = decision_json(decision, key)
    if use_cache:
        store_record({
            **result,
            "machine": machine,
            "dataset": {"path": str(ds.path), "fingerprint": ds.fingerprint},
            "params": params.as_dict(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        })
    log.info("autotune %s: %s %s (%s)", key, result["choice"], result["backend_options"],
             result["reason"])
    return result


def _cached_choice_available(record: dict, device: str) -> bool:
    names = {c.name for c in enumerate_candidates(device) if c.available}
    return any(c["name"] in names for c in record["candidates"]
               if c["backend"] == record["choice"] and c["params"] == record["backend_options"])


def resolve_auto_backend(
    dataset,
    *,
    batch_size: int,
    image_size,
    augment: str,
    dtype="float16",
    device="cpu",
    budget: float = DEFAULT_AUTO_BUDGET,
    use_cache: bool = True,
    progress: bool = False,
) -> tuple[str, dict, str]:
    """(backend name, backend_options, reason) for Pipeline(backend="auto").

    A stored decision for this machine + dataset + parameters wins; else, when the GPU backends
    cannot run (no CUDA device, device="cpu", DALI not installed), "cpu" with its default options
    and no measuring; else a quick tune within `budget` seconds, stored for next time."""
    from chute._device import cuda_device_count

    ds = _open(dataset)
    params = TuneParams(batch_size, image_size, augment, dtype, device)
    key, _ = _key(ds, params)
    record = load_record(key) if use_cache else None
    if record is not None and _cached_choice_available(record, params.device):
        return (record["choice"], dict(record["backend_options"]),
                f"autotune decision {key} of {record.get('created', '?')}: {record['reason']}")
    gpu_unavailable = dali_unavailable_reason(params.device, cuda_device_count())
    if gpu_unavailable:  # only cpu candidates: nothing to compare the CPU with
        return "cpu", {}, ("cpu chosen without measuring: the GPU backends cannot run here "
                           f"({gpu_unavailable})")
    result = autotune(ds, params, budget=budget, use_cache=use_cache, progress=progress)
    return (result["choice"], result["backend_options"],
            f"quick autotune ({budget:g}s budget, decision {key}): {result['reason']}")
