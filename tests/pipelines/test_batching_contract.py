"""The batching contract (chute/pipelines/sampling/_batching.py), checked with the same
assertions on every batching -- fixed batches, MaxDuration, Buckets -- and on the sample units
they combine with (dataset rows, audio segments, merged segments): ranks take disjoint samples
in the same number of steps, and a state saved after any step on W ranks, loaded on W' ranks,
delivers exactly the samples the unbroken epoch had left."""

from __future__ import annotations

import pytest

from chute import AudioOptions, Buckets, MaxDuration, Pipeline, VideoOptions
from tests.pipelines._pipeline_data import write_dataset


@pytest.fixture(scope="module")
def latents(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("lat") / "ds", n=30, latent_shape=(2, 3),
                         images=False)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from tests._audio import convert_recordings

    return convert_recordings(tmp_path_factory.mktemp("rec"))


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    pytest.importorskip("av")
    from tests._video_media import convert_videos, make_video

    folder = tmp_path_factory.mktemp("vid")
    sizes = [(32, 48), (48, 32), (32, 48), (32, 32), (48, 64), (32, 48), (48, 32), (32, 32)]
    return convert_videos(folder, [(f"v{k}.mp4", make_video(n=12, height=h, width=w, gop=4))
                                   for k, (h, w) in enumerate(sizes)])


# name -> (dataset fixture, Pipeline arguments): one case per batching x sample unit
CASES = {
    "fixed/rows": ("latents", dict(batch_size=4, fields=("latent", "label"))),
    "fixed/rows/unshuffled": ("latents", dict(batch_size=4, fields=("latent",),
                                              order="sequential")),
    "fixed/segments": ("recordings", dict(batch_size=2, fields={
        "audio": AudioOptions(unit="segment", sample_rate=8000)})),
    "max-duration/segments": ("recordings", dict(batch_size=None,
                                                 batching=MaxDuration(2.5, max_samples=3),
                                                 fields={"audio": AudioOptions(
                                                     unit="segment", sample_rate=8000)})),
    "max-duration/merged": ("recordings", dict(batch_size=None,
                                               batching=MaxDuration(2.5, max_samples=3),
                                               fields={"audio": AudioOptions(
                                                   unit="segment", merge=(0.3, 0.9),
                                                   sample_rate=8000)})),
    "buckets/clips": ("videos", dict(batch_size=None, batching=Buckets(
        {"32x48": {2: (1.0, 2)}, "32x32": {2: (1.0, 1)}}),
        fields={"video": VideoOptions(frame_interval=2)})),
}


def _pipe(request, case, rank, world, **kw):
    fixture, args = CASES[case]
    path = request.getfixturevalue(fixture)
    return Pipeline(path, device="cpu", seed=7, rank=rank, world_size=world, **args, **kw)


def _epoch(pipes):
    """Every rank's batches of one epoch, as lists of sample ids."""
    return [[b["index"].tolist() for b in p] for p in pipes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_ranks_are_disjoint_and_take_equal_steps(request, case):
    whole = _epoch([_pipe(request, case, 0, 1)])[0]
    ranks = _epoch([_pipe(request, case, r, 2) for r in range(2)])
    assert len(ranks[0]) == len(ranks[1]) > 0
    seen = [i for rank in ranks for batch in rank for i in batch]
    assert len(seen) == len(set(seen))
    assert set(seen) <= {i for batch in whole for i in batch}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("worlds", [(2, 2), (2, 1), (1, 2)])
def test_resume_after_any_step_on_another_world_size_loses_and_repeats_nothing(
        request, case, worlds):
    before, after = worlds
    unbroken = _epoch([_pipe(request, case, r, before) for r in range(before)])
    delivered = sorted(i for rank in unbroken for batch in rank for i in batch)
    for step in range(len(unbroken[0])):
        last = step + 1 == len(unbroken[0])
        pipes = [_pipe(request, case, r, before) for r in range(before)]
        iters = [iter(p) for p in pipes]
        done = [i for it in iters for _ in range(step + 1) for i in next(it)["index"].tolist()]
        state = pipes[0].state_dict()
        assert all(p.state_dict() == state for p in pipes)  # any rank's state is the job's
        for p in pipes:
            p.close()
        if last:  # the epoch is over: the state is the next epoch's start
            assert (state["epoch"], state["position"]) == (1, 0)
            continue
        resumed = [_pipe(request, case, r, after) for r in range(after)]
        for p in resumed:
            p.load_state_dict(state)
        rest = _epoch(resumed)
        if after > 1:
            assert len({len(r) for r in rest}) == 1  # equal steps on every rank
        total = done + [i for rank in rest for batch in rank for i in batch]
        assert len(total) == len(set(total)), f"{case}: a sample repeated after step {step}"
        if before == after:
            assert sorted(total) == delivered, f"{case}: resumed after step {step}"
        else:  # the positions left are re-partitioned: at most the dropped tail differs
            slot = pipes[0].batch_size
            assert len(total) >= len(delivered) - slot * max(before, after)


def test_unshuffled_is_the_dataset_order(latents):
    with Pipeline(latents, 4, fields=("label",), order="sequential", augment="eval") as pipe:
        assert [i for b in pipe for i in b["index"].tolist()] == list(range(30))
    ranks = [Pipeline(latents, 4, fields=("label",), order="sequential", augment="eval", rank=r,
                      world_size=2) for r in range(2)]
    ids = [[i for b in p for i in b["index"].tolist()] for p in ranks]
    assert sorted(ids[0] + ids[1]) == list(range(30)) and ids[0][:4] == [0, 2, 4, 6]


def test_unshuffled_max_duration_packs_in_order(recordings):
    options = AudioOptions(unit="segment", sample_rate=8000)
    with Pipeline(recordings, None, fields={"audio": options},
                  batching=MaxDuration(2.5, max_samples=3),
                  order="sequential") as pipe:
        ids = [i for b in pipe for i in b["index"].tolist()]
    assert ids == sorted(ids)


def test_buckets_refuse_shuffle_false_and_a_batch_size(videos):
    buckets = Buckets({"32x48": {2: (1.0, 2)}})
    with pytest.raises(ValueError, match="order='sequential' is not available"):
        Pipeline(videos, None, fields={"video": VideoOptions()}, batching=buckets,
                 order="sequential")
    with pytest.raises(ValueError, match="pass batch_size=None"):
        Pipeline(videos, 4, fields={"video": VideoOptions()}, batching=buckets)


def test_a_state_from_another_batching_is_refused(videos, latents):
    buckets = Buckets({"32x48": {2: (1.0, 2)}, "32x32": {2: (1.0, 1)}})
    with Pipeline(videos, None, fields={"video": VideoOptions()}, batching=buckets) as pipe:
        next(iter(pipe))
        state = pipe.state_dict()
    assert "bucket_offsets" in state
    with Pipeline(videos, 2, fields={"video": VideoOptions()}) as plain, \
            pytest.raises(ValueError, match="Buckets"):
        plain.load_state_dict(state)
