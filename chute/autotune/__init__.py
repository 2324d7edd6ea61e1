"""autotune: measure the backends this machine can run on a dataset at a batch shape, choose
the fastest (ties -> the cheapest), explain why, and remember the decision.

`chute autotune` and `Pipeline(backend="auto")` (through `resolve_auto_backend`) use it. The
`--json` object is documented in chute/autotune/_report.py.
"""

from chute.autotune._auto import (
    DEFAULT_AUTO_BUDGET,
    DEFAULT_BUDGET,
    autotune,
    resolve_auto_backend,
)
from chute.autotune._cache import cache_dir, decision_path, load_record, store_record
from chute.autotune._candidates import Candidate, dali_unavailable_reason, enumerate_candidates
from chute.autotune._fingerprint import TuneParams, decision_key, machine_fingerprint
from chute.autotune._gpu import GpuSampler, gpu_facts
from chute.autotune._measure import BatchSource, BudgetExhausted, Measurement, measure
from chute.autotune._report import CANDIDATE_KEYS, JSON_KEYS, decision_json, format_table
from chute.autotune._runner import pipeline_runner
from chute.autotune._select import TIE_TOLERANCE, Decision, Trial, select
from chute.autotune._tune import tune

__all__ = [
    "autotune",
    "resolve_auto_backend",
    "DEFAULT_BUDGET",
    "DEFAULT_AUTO_BUDGET",
    "Candidate",
    "enumerate_candidates",
    "dali_unavailable_reason",
    "TuneParams",
    "machine_fingerprint",
    "decision_key",
    "cache_dir",
    "decision_path",
    "load_record",
    "store_record",
    "BatchSource",
    "Measurement",
    "BudgetExhausted",
    "measure",
    "GpuSampler",
    "gpu_facts",
    "Trial",
    "Decision",
    "select",
    "TIE_TOLERANCE",
    "tune",
    "pipeline_runner",
    "decision_json",
    "format_table",
    "JSON_KEYS",
    "CANDIDATE_KEYS",
]
