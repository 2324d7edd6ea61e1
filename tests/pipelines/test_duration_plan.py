"""Duration batching: chute/pipelines/sampling/_duration_plan.py."""

from __future__ import annotations

import numpy as np
import pytest

from chute.pipelines.sampling._duration_plan import DurationPlan, pack_batches

N = 300
DURATIONS = np.random.default_rng(3).uniform(0.5, 4.0, N)


def _plan(rank=0, world=1, position=0, epoch=0, max_duration=10.0, window=64):
    return DurationPlan(None, N, 7, epoch, rank, world, 8, True, position,
                        max_duration=max_duration, durations=DURATIONS, window=window)


def _all(plan):
    return [plan.ids(k) for k in range(len(plan))]


def test_pack_batches_respects_both_limits_and_keeps_every_id():
    ids = np.arange(50, dtype=np.int64) * 3
    batches = pack_batches(ids, DURATIONS[:50], 6.0, 4)
    assert sorted(np.concatenate(batches).tolist()) == ids.tolist()
    for b in batches:
        assert len(b) <= 4 and DURATIONS[b // 3].sum() <= 6.0


def test_batches_within_limits_disjoint_equal_per_rank_and_pure():
    ranks = [_all(_plan(r, 3)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1  # the same number of steps on every rank
    seen = np.concatenate([b for r in ranks for b in r])
    assert len(seen) == len(set(seen.tolist()))  # disjoint
    for b in (b for r in ranks for b in r):
        assert DURATIONS[b].sum() <= 10.0 and len(b) <= 8
    again = _all(_plan(1, 3))
    assert all(np.array_equal(a, b) for a, b in zip(ranks[1], again, strict=True))
    other = _all(_plan(1, 3, epoch=1))
    assert not all(np.array_equal(a, b) for a, b in zip(ranks[1], other, strict=False))


def test_resume_is_exact_also_with_another_world_size():
    two = [_plan(r, 2) for r in range(2)]
    done = 3
    position = two[0].position_after(done)
    assert position == sum(len(two[r].ids(k)) for r in range(2) for k in range(done))
    global_rest = [b for k in range(done, len(two[0])) for b in (two[0].ids(k), two[1].ids(k))]
    one = _plan(0, 1, position=position)
    resumed = _all(one)[:len(global_rest)]
    assert all(np.array_equal(a, b) for a, b in zip(resumed, global_rest, strict=True))
    with pytest.raises(ValueError, match="batch boundary"):
        len(_plan(0, 1, position=position + 1))


def test_a_sample_longer_than_the_limit_raises_naming_it():
    with pytest.raises(ValueError, match="longer than max_duration=3.0"):
        _plan(max_duration=3.0)


def test_pipeline_duration_batches_never_exceed_the_limit(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from chute.pipelines import AudioOptions, MaxDuration, Pipeline
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path)
    pipe = Pipeline(folder, 6, batching=MaxDuration(2.0),
                    fields={"audio": AudioOptions(unit="segment", sample_rate=8000)})
    batches = [(b["audio_lengths"].sum().item(), len(b["index"])) for b in pipe]
    assert batches and all(frames <= 2.0 * 8000 and n <= 6 for frames, n in batches)
    state = pipe.state_dict()  # the epoch is over: the state is the next epoch's start
    assert (state["epoch"], state["position"]) == (1, 0)
    # slowed down by speed perturbation, samples deliver more seconds: the limit still holds
    slow = Pipeline(folder, 6, batching=MaxDuration(2.5), fields={
        "audio": AudioOptions(unit="segment", sample_rate=8000, speeds=(0.8,))})
    frames = [int(b["audio_lengths"].sum()) for b in slow]
    assert frames and max(frames) <= 2.5 * 8000
    with pytest.raises(ValueError, match=r"longer than max_duration=2.0 s \(e.g. sample 5: 2.250"):
        Pipeline(folder, 6, batching=MaxDuration(2.0), fields={
            "audio": AudioOptions(unit="segment", sample_rate=8000, speeds=(0.8,))})


@pytest.mark.slow
def test_two_gloo_ranks_take_disjoint_segments_in_equal_steps(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    import json

    import torch.multiprocessing as mp

    from tests._audio import convert_recordings
    from tests.pipelines._ddp_audio_worker import run

    folder = convert_recordings(tmp_path / "data")
    mp.spawn(run, args=(2, str(folder), str(tmp_path)), nprocs=2, join=True)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert {r["world_size"] for r in reports} == {2}
    assert reports[0]["batches"] == reports[1]["batches"] > 0
    assert not set(reports[0]["ids"]) & set(reports[1]["ids"])
    assert all(f <= 2 * 8000 for r in reports for f in r["frames"])
