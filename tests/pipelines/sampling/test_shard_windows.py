"""order=ShardWindows(...) (issue 23 item 3): shards in a keyed order, samples shuffled within
windows of a few shards; still a bijection per (seed, epoch), so DDP is disjoint, steps are
equal and resume is exact, while each batch reads from at most two windows."""

import itertools

import numpy as np
import pytest
import torch

from chute import Pipeline, ShardWindows
from chute.pipelines.sampling._windows import WindowOrder
from tests.pipelines._pipeline_data import write_dataset

STARTS = (0, 10, 25, 31, 50, 64, 80, 81, 100)


@pytest.mark.parametrize("shards", [1, 2, 3, 8, 20])
def test_the_order_is_a_bijection_that_keeps_to_its_windows(shards):
    order = WindowOrder(STARTS, shards, seed=4, epoch=2)
    ids = order(np.arange(100))
    assert sorted(ids.tolist()) == list(range(100))
    shard_of = np.searchsorted(STARTS, ids, side="right") - 1
    # every window's positions hold the samples of `shards` whole shards
    seen = []
    pos = 0
    while pos < 100:
        group = set()
        while pos < 100 and (len(group) < shards or shard_of[pos] in group):
            group.add(int(shard_of[pos]))
            pos += 1
        seen.append(group)
    assert all(len(g) <= shards for g in seen)
    assert [s for g in seen for s in g] == list(dict.fromkeys(s for g in seen for s in g))
    np.testing.assert_array_equal(order(np.arange(100)), ids)  # pure
    assert not np.array_equal(WindowOrder(STARTS, shards, 4, 3)(np.arange(100)), ids)


def test_per_position_evaluation_matches_the_whole_epoch():
    order = WindowOrder(STARTS, 3, seed=1, epoch=0)
    whole = order(np.arange(100))
    for p in (0, 9, 10, 57, 99):
        assert int(order(np.array([p]))[0]) == int(whole[p])


def test_bad_window_sizes_are_refused():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="ShardWindows"):
            ShardWindows(shards=bad)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("win") / "d.chute", n=90, sizes=(16, 24),
                         shard_size="3KiB")


def labels(path, **kw):
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 5, **kw}
    return Pipeline(path, 6, fields=("label",), order=ShardWindows(2), **kw)


def run(pipe, limit=None):
    return [b["index"].clone() for b in itertools.islice(pipe, limit)]


def test_pipeline_ranks_are_disjoint_with_equal_steps_and_resume_is_exact(dataset):
    with labels(dataset, augment="eval") as pipe:
        everything = torch.cat(run(pipe)).tolist()
    assert sorted(everything) == list(range(90))
    per_rank = []
    for rank in range(3):
        with labels(dataset, rank=rank, world_size=3) as pipe:
            per_rank.append(run(pipe))
    assert len({len(r) for r in per_rank}) == 1
    flat = [set(torch.cat(r).tolist()) for r in per_rank]
    assert not (flat[0] & flat[1]) and not (flat[1] & flat[2]) and not (flat[0] & flat[2])
    with labels(dataset) as pipe:
        pipe.set_epoch(1)
        full = run(pipe)
    with labels(dataset) as pipe:
        pipe.set_epoch(1)
        head = run(pipe, 3)
        state = pipe.state_dict()
    with labels(dataset) as pipe:
        pipe.load_state_dict(state)
        tail = run(pipe)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, full, strict=True))


def test_refused_where_it_would_be_ignored(dataset):
    from chute import MaxDuration

    with pytest.raises(ValueError, match="ShardWindows.*not available with"):
        Pipeline(dataset, fields=("label",), batching=MaxDuration(2.0, max_samples=8),
                 order=ShardWindows(2), device="cpu")
