"""autotune: measure candidates on a dataset at a batch shape, choose the fastest (ties -> the
cheapest), explain why, and remember the decision per machine + dataset + parameters.

A library: it imports nothing of chute above its small root helpers. The caller injects what
to compare (candidates, see `CandidateLike`) and how to run one (a runner returning a
`BatchSourceLike`); chute.pipelines calls it for backend="auto"
(chute/pipelines/producers/image/_auto.py). The `--json` object is documented in
chute/autotune/_report.py.
"""

from chute.autotune._autotune import DEFAULT_BUDGET, autotune, stored_decision
from chute.autotune._cache import cache_dir, decision_path, load_record, store_record
from chute.autotune._candidate import Candidate, CandidateLike
from chute.autotune._fingerprint import TuneParams, decision_key, machine_fingerprint
from chute.autotune._gpu import GpuSampler, gpu_facts
from chute.autotune._identity import DatasetIdentity, dataset_identity
from chute.autotune._measure import (
    BatchSource,
    BatchSourceLike,
    BudgetExhausted,
    Measurement,
    measure,
)
from chute.autotune._report import CANDIDATE_KEYS, JSON_KEYS, decision_json, format_table
from chute.autotune._select import TIE_TOLERANCE, Decision, Trial, select
from chute.autotune._tune import Runner, tune

__all__ = [
    "autotune",
    "stored_decision",
    "DEFAULT_BUDGET",
    "Candidate",
    "CandidateLike",
    "DatasetIdentity",
    "dataset_identity",
    "TuneParams",
    "machine_fingerprint",
    "decision_key",
    "cache_dir",
    "decision_path",
    "load_record",
    "store_record",
    "BatchSource",
    "BatchSourceLike",
    "Measurement",
    "BudgetExhausted",
    "measure",
    "GpuSampler",
    "gpu_facts",
    "Trial",
    "Decision",
    "select",
    "TIE_TOLERANCE",
    "Runner",
    "tune",
    "decision_json",
    "format_table",
    "JSON_KEYS",
    "CANDIDATE_KEYS",
]
