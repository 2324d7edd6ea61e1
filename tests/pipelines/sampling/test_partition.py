import numpy as np
import pytest

from chute.pipelines import Partition


def all_positions(n, start, world, batch, drop_last):
    per_rank = []
    for r in range(world):
        p = Partition(n, start, r, world, batch, drop_last)
        per_rank.append([p.batch_positions(t) for t in range(p.batches)])
    return per_rank


@pytest.mark.parametrize("n,world,batch", [(100, 1, 8), (100, 4, 8), (101, 3, 5), (7, 4, 2)])
def test_eval_covers_every_position_exactly_once(n, world, batch):
    per_rank = all_positions(n, 0, world, batch, drop_last=False)
    flat = np.concatenate([b for rank in per_rank for b in rank])
    assert np.array_equal(np.sort(flat), np.arange(n))
    for rank in per_rank:
        assert all(len(b) == batch for b in rank[:-1])


def test_eval_batch_counts_equal_unless_final_round_smaller_than_world():
    # 96 = 3 full rounds of 4 ranks x 8; +5 leaves >= W samples for the last round
    counts = [Partition(101, 0, r, 4, 8, False).batches for r in range(4)]
    assert counts == [4, 4, 4, 4]
    # +2 < W: ranks 2, 3 cannot get a non-empty last batch without duplicates
    counts = [Partition(98, 0, r, 4, 8, False).batches for r in range(4)]
    assert counts == [4, 4, 3, 3]


@pytest.mark.parametrize("n,world,batch,start", [(100, 4, 8, 0), (101, 3, 5, 17), (64, 2, 32, 0)])
def test_train_ranks_are_disjoint_and_equal(n, world, batch, start):
    per_rank = all_positions(n, start, world, batch, drop_last=True)
    assert len({len(rank) for rank in per_rank}) == 1
    flat = np.concatenate([b for rank in per_rank for b in rank] or [np.empty(0, np.int64)])
    assert len(np.unique(flat)) == len(flat)
    assert all(len(b) == batch for rank in per_rank for b in rank)
    k = len(per_rank[0])
    # exactly the first k rounds of positions from `start` are delivered
    assert np.array_equal(np.sort(flat), np.arange(start, start + k * batch * world))


def test_resume_position_continues_the_same_stream():
    full = Partition(100, 0, 1, 4, 4, True)
    after = full.position_after(2)
    assert after == 32
    resumed = Partition(100, after, 1, 4, 4, True)
    assert resumed.batches == full.batches - 2
    for t in range(resumed.batches):
        assert np.array_equal(resumed.batch_positions(t), full.batch_positions(t + 2))
