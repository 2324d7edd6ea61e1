"""Two real torch.distributed (gloo, CPU) processes iterate one epoch of the same dataset."""

import json

import pytest
import torch.multiprocessing as mp

from tests.pipelines._ddp_worker import run
from tests.pipelines._pipeline_data import write_dataset

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

pytest.importorskip("chute.fallbacks._decode")

N = 42


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_two_ranks_disjoint_complete_equal(tmp_path, augment):
    dataset = write_dataset(tmp_path / "ds.chute", n=N)
    mp.spawn(run, args=(2, str(dataset), str(tmp_path), augment), nprocs=2, join=True)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in reports] == [0, 1]  # detected from the process group
    assert all(r["world_size"] == 2 for r in reports)
    a, b = (set(r["ids"]) for r in reports)
    assert not a & b
    assert len(reports[0]["ids"]) == len(a) and len(reports[1]["ids"]) == len(b)
    assert reports[0]["batches"] == reports[1]["batches"]
    if augment == "eval":
        assert a | b == set(range(N))  # every sample exactly once
    else:
        assert len(a) == len(b) == (N // 8) * 4  # equal full batches, tail dropped
