"""backend="auto" under DDP: two real torch.distributed (gloo, CPU) processes; only rank 0 runs
the resolver and every rank gets its decision, or its failure."""

import json

import pytest
import torch.multiprocessing as mp

from tests.pipelines._ddp_auto_worker import DECISION, run
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")
pytestmark = pytest.mark.slow


def test_only_rank_zero_resolves_and_every_rank_gets_its_decision(tmp_path):
    dataset = write_dataset(tmp_path / "ds.chute", n=16)
    mp.spawn(run, args=(2, str(dataset), str(tmp_path)), nprocs=2, join=True)

    calls = (tmp_path / "calls-rank0.jsonl").read_text().splitlines()
    # the decider, the Pipeline, the failing decider: three calls, all on rank 0
    assert [json.loads(c)["fail"] for c in calls] == [False, False, True]
    assert not (tmp_path / "calls-rank1.jsonl").exists()

    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    shared = [DECISION[0], DECISION[1],
              "decided by the resolver on rank 0 [decided on rank 0 for all 2 ranks]"]
    assert reports[0]["decision"] == reports[1]["decision"] == shared
    assert reports[0]["pipeline"] == reports[1]["pipeline"] == shared

    assert reports[0]["error"] == "RuntimeError: rank 0 could not tune"
    assert reports[1]["error"].startswith("BackendUnavailableError: backend='auto': rank 0 could "
                                          "not choose a backend for all 2 ranks (RuntimeError: "
                                          "rank 0 could not tune)")
    assert "name a backend (backend='cpu', 'dali' or 'dali-native')" in reports[1]["error"]

    # a video field's failure tells the other ranks how to name the video field's backend
    assert reports[0]["video_error"] == "RuntimeError: rank 0 could not measure"
    assert reports[1]["video_error"].startswith("BackendUnavailableError: backend='auto'")
    assert ("name the video field's backend on every rank (VideoOptions(backend='cpu'), "
            "'dali' or 'nvdec')") in reports[1]["video_error"]
    assert "dali-native" not in reports[1]["video_error"]
