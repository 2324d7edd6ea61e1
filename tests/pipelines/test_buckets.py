"""Buckets: the assignment rule, one bucket per step on every rank, disjoint ranks, shapes that
match the bucket, exact resume."""

from __future__ import annotations

import numpy as np
import pytest

from chute.pipelines._bucket_plan import BucketPlan
from chute.pipelines._buckets import parse_buckets

CONFIG = {"480p": {16: (1.0, 2)}, "240p": {1: (1.0, 8), 16: (1.0, 4), 32: (0.5, 2)}}


def _columns(n=400, seed=0):
    rng = np.random.default_rng(seed)
    heights = rng.choice([200, 240, 360, 480, 720, 1080], n)
    widths = (heights * rng.choice([0.5, 1.0, 1.33, 1.78, 2.0], n)).astype(int)
    frames = rng.integers(1, 120, n)
    return heights, widths, frames


def _plan(table, rank, world, drop_last=True, start=0, epoch=0, mode="train"):
    h, w, f = _columns()
    return BucketPlan(None, len(h), 3, epoch, rank, world, drop_last, start, table, mode,
                      h, w, f)


def test_assignment_follows_the_rules():
    table = parse_buckets(CONFIG, frame_interval=2)
    h = np.array([720, 400, 720, 100, 720])
    w = np.array([1280, 400, 400, 100, 1280])
    f = np.array([100, 40, 5, 100, 20])
    chosen = table.assign(0, 0, h, w, f)
    got = [(table.buckets[c].resolution, table.buckets[c].num_frames) if c >= 0 else None
           for c in chosen]
    assert got[0] == ("480p", 16)  # fits the largest resolution and 16 frames (span 31)
    assert got[1] == ("240p", 16)  # 400x400 < 480p's budget: no upscaling
    assert got[2] == ("240p", 1)  # 5 frames: only the 1-frame entry fits
    assert got[3] is None  # 100x100 is smaller than every resolution
    assert got[4] == ("240p", 1)  # 20 frames at interval 2 are too few for 16 (span 31)
    ratios = [table.buckets[c].ratio for c in chosen]
    assert ratios[0] == pytest.approx(0.5625) and ratios[1] == 1.0 and ratios[2] > 1.5
    for b in table.buckets:
        assert b.size[0] % 16 == 0 and b.size[1] % 16 == 0


@pytest.mark.parametrize("drop_last", [True, False])
def test_every_step_one_bucket_on_every_rank_and_ranks_disjoint(drop_last):
    table = parse_buckets(CONFIG, frame_interval=2)
    plans = [_plan(table, r, 2, drop_last) for r in range(2)]
    seen = []
    for k in range(min(len(p) for p in plans)):
        a, b = (p.request(k) for p in plans)
        assert a.params["bucket"][0] == b.params["bucket"][0]
        bucket = table.buckets[int(a.params["bucket"][0])]
        assert len(a.ids) <= bucket.batch_size and set(a.ids).isdisjoint(b.ids)
        assert (a.params["clip_frames"] == bucket.num_frames).all()
        assert tuple(a.params["clip_size"][0]) == bucket.size
        if drop_last:
            assert len(a.ids) == len(b.ids) == bucket.batch_size
        seen += a.ids.tolist() + b.ids.tolist()
    if drop_last:
        assert len(plans[0]) == len(plans[1])
    else:  # evaluation: every assigned sample exactly once
        h, w, f = _columns()
        assigned = np.flatnonzero(table.assign(3, 0, h, w, f) >= 0)
        everything = [i for p in plans for k in range(len(p)) for i in p.request(k).ids]
        assert sorted(everything) == sorted(assigned.tolist())
    assert len(seen) == len(set(seen))


def test_resume_after_k_steps_is_exact():
    table = parse_buckets(CONFIG, frame_interval=2)
    full = _plan(table, 1, 2)
    k = 5
    resumed = _plan(table, 1, 2, start=full.position_after(k))
    assert len(resumed) == len(full) - k
    for j in range(len(resumed)):
        a, b = full.request(k + j), resumed.request(j)
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.params["clip_start"], b.params["clip_start"])


def test_the_schedule_depends_on_seed_and_epoch_only():
    table = parse_buckets(CONFIG)
    a, b, c = _plan(table, 0, 1), _plan(table, 0, 1), _plan(table, 0, 1, epoch=1)
    assert [a.request(k).ids.tolist() for k in range(5)] == \
        [b.request(k).ids.tolist() for k in range(5)]
    assert [a.request(k).ids.tolist() for k in range(5)] != \
        [c.request(k).ids.tolist() for k in range(5)]


def test_bad_configs_are_explained():
    with pytest.raises(ValueError, match="unknown"):
        parse_buckets({"999q": {1: (1.0, 1)}})
    with pytest.raises(ValueError, match="keep probability, batch size"):
        parse_buckets({"240p": {16: 4}})
    with pytest.raises(ValueError, match="keep must be in"):
        parse_buckets({"240p": {16: (2.0, 4)}})
