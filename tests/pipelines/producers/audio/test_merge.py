"""Dynamic segment merging: chute/pipelines/producers/audio/_merge.py and
`Pipeline(fields={"audio": AudioOptions(unit="segment", merge=(min_s, max_s))})`."""

from __future__ import annotations

import numpy as np
import pytest

from chute.pipelines.producers.audio._merge import MergeTable, SegmentMerge, check_merge
from chute.pipelines.sampling._keyed_random import derive_key, uniform

RATE = 100.0  # frames per second of the synthetic tables: easy numbers


def _table(seed=5, recordings=40):
    """Segments of several recordings: mostly in time order with gaps and overlaps, some
    longer than max_s, and now and then one that goes back in time (a run break)."""
    rng = np.random.default_rng(seed)
    starts, stops, recording = [], [], []
    for r in range(recordings):
        t = 0
        for _ in range(rng.integers(1, 30)):
            if rng.random() < 0.1:
                t = max(0, t - 300)  # earlier than the previous one: not mergeable
            start = t + int(rng.integers(-20, 60))  # overlap or gap
            start = max(start, 0)
            stop = start + int(rng.integers(20, 450))
            starts.append(start)
            stops.append(stop)
            recording.append(r)
            t = stop
    n = len(starts)
    return (np.asarray(starts), np.asarray(stops), np.asarray(recording), np.full(n, RATE))


def _reference(starts, stops, recording, rates, merge, seed, epoch) -> list[int]:
    """The merging rule walked segment by segment: the first segment of every sample."""
    n = len(starts)
    u = uniform(derive_key(seed, epoch, "merge"), np.arange(n, dtype=np.int64))
    firsts, i = [], 0
    while i < n:
        firsts.append(i)
        end = i + 1  # the run of segment i ends before `end`
        while (end < n and recording[end] == recording[end - 1]
               and starts[end] >= starts[end - 1] and stops[end] >= stops[end - 1]):
            end += 1
        run_end = end
        while i < run_end:
            target = merge.min_s + u[i] * (merge.max_s - merge.min_s)
            last = i
            while (last + 1 < run_end and stops[last] - starts[i] < target * rates[i]
                   and stops[last + 1] - starts[i] <= np.floor(merge.max_s * rates[i])):
                last += 1
            i = last + 1
            if i < run_end:
                firsts.append(i)
    return firsts


def test_merged_samples_follow_the_rule_and_are_a_pure_function_of_seed_epoch():
    table_args = _table()
    merge = SegmentMerge(2.0, 5.0)
    table = MergeTable(*table_args, merge)
    starts, stops, recording, _ = table_args
    for seed, epoch in ((0, 0), (0, 1), (3, 0)):
        bounds = table.bounds(seed, epoch)
        assert bounds[:-1].tolist() == _reference(*table_args, merge, seed, epoch)
        assert bounds[-1] == len(starts) and (np.diff(bounds) > 0).all()
        first, last = bounds[:-1], bounds[1:] - 1
        assert (recording[first] == recording[last]).all()
        spans = (stops[last] - starts[first]) / RATE
        merged = last > first
        assert merged.sum() > 20 and (spans[merged] <= 5.0).all()
    assert np.array_equal(table.bounds(0, 0), MergeTable(*table_args, merge).bounds(0, 0))
    assert not np.array_equal(table.bounds(0, 0), table.bounds(0, 1))


def test_short_samples_only_where_the_range_cannot_be_reached():
    merge = SegmentMerge(3.0, 4.0)
    starts, stops, recording, rates = _table(seed=9)
    bounds = MergeTable(starts, stops, recording, rates, merge).bounds(1, 2)
    for k in range(len(bounds) - 1):
        first, last = bounds[k], bounds[k + 1] - 1
        if (stops[last] - starts[first]) / RATE >= 3.0:
            continue
        after = last + 1  # a short sample ends its run, or its next segment would overflow
        assert (after == len(starts) or recording[after] != recording[last]
                or starts[after] < starts[last] or stops[after] < stops[last]
                or (stops[after] - starts[first]) / RATE > 4.0)


def test_one_long_recording_is_merged_in_linear_steps():
    n = 20000  # one run: every step of the chain walk advances it by a sample
    starts = np.arange(n, dtype=np.int64) * 50
    table = MergeTable(starts, starts + 50, np.zeros(n, np.int64), np.full(n, RATE),
                       SegmentMerge(1.0, 2.0))
    sizes = np.diff(table.bounds(0, 0))
    assert sizes.sum() == n and set(sizes[:-1].tolist()) <= {2, 3, 4}


def test_bad_merge_arguments_raise_naming_them():
    assert check_merge(None, "segment") is None
    assert check_merge((1, 2), "segment") == SegmentMerge(1.0, 2.0)
    with pytest.raises(ValueError, match="min_s 3.0 > max_s 2.0"):
        check_merge((3, 2), "segment")
    with pytest.raises(ValueError, match="min_s >= 0"):
        check_merge((-1, 2), "segment")
    with pytest.raises(ValueError, match="max_s > 0"):
        check_merge((0, 0), "segment")
    with pytest.raises(ValueError, match=r"\(min_s, max_s\)"):
        check_merge(5, "segment")
    with pytest.raises(ValueError, match="needs unit='segment'.*'recording'"):
        check_merge((1, 2), "recording")
    with pytest.raises(ValueError, match="needs unit='segment'.*None"):
        check_merge((1, 2), None)


# ---- AudioOptions(unit="segment", merge=...) on real audio -----------------------------------

NAMES = ("a.wav", "b.flac")  # both 16 kHz mono: no resampling, so slices compare exactly
SEGMENTS = {
    "a.wav": [(0.0, 0.3), (0.3, 0.55), (0.6, 0.9), (0.9, 1.2), (1.25, 1.5)],
    # the last one goes back in time: it starts a run of its own
    "b.flac": [(0.1, 0.4), (0.4, 0.8), (0.8, 0.85), (0.85, 1.3), (1.3, 1.9), (0.2, 0.5)],
}


def _segments(name):
    return [{"start": s, "end": e, "txt": f"{name[0]}{k}" if k != 2 else ""}
            for k, (s, e) in enumerate(SEGMENTS[name])]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    pytest.importorskip("soundfile")
    from tests._audio import convert_recordings

    return convert_recordings(tmp_path_factory.mktemp("merge"), names=NAMES,
                              segments=_segments)


def _pipe(folder, batch_size=3, merge=(0.5, 1.0), **kwargs):
    from chute.pipelines import AudioOptions, Pipeline

    fields = {"audio": AudioOptions(unit="segment", merge=merge)}
    return Pipeline(folder, batch_size, fields=fields, **({"seed": 1} | kwargs))


def _collect(pipe) -> list[dict]:
    return [{k: (v.clone() if hasattr(v, "clone") else v) for k, v in b.items()} for b in pipe]


def test_merged_audio_equals_soundfile_read_of_the_whole_span(folder):
    import soundfile as sf

    pipe = _pipe(folder, augment="eval")
    batches = _collect(pipe)
    spans = [(seg, b["audio"][row, :int(b["audio_lengths"][row])].numpy())
             for b in batches for row, seg in enumerate(b["audio_segment"])]
    assert len(spans) == pipe.plan(0).n < 11  # some segments were merged
    joined = 0
    for seg, audio in spans:
        name, rate = seg["key"], 16000
        listed = SEGMENTS[name]
        first = next(k for k, (s, _) in enumerate(listed) if s == pytest.approx(seg["start"]))
        last = first + next(k for k, (_, e) in enumerate(listed[first:])
                            if e == pytest.approx(seg["end"]))
        joined += last > first
        assert seg["txt"] == " ".join(t["txt"] for t in _segments(name)[first:last + 1]
                                      if t["txt"])
        want = sf.read(folder.parent / name, start=round(listed[first][0] * rate),
                       stop=round(listed[last][1] * rate), dtype="float32")[0]
        np.testing.assert_array_equal(audio, want)
        assert seg["end"] - seg["start"] <= 1.0 + 1e-9 or first == last
    assert joined >= 3


def test_duration_batches_ranks_and_resume_with_merging(folder):
    from chute.pipelines import AudioOptions, MaxDuration, Pipeline

    ranks = [_pipe(folder, rank=r, world_size=2, batching=MaxDuration(2.0, max_samples=4),
                   batch_size=None)
             for r in range(2)]
    for epoch in (0, 1):
        for p in ranks:
            p.set_epoch(epoch)
        got = [_collect(p) for p in ranks]
        assert len(got[0]) == len(got[1]) > 0
        ids = [sum((b["index"].tolist() for b in g), []) for g in got]
        assert not set(ids[0]) & set(ids[1])
        assert all(int(b["audio_lengths"].sum()) <= 2.0 * 16000 for g in got for b in g)
    unit = ranks[0]._unit
    assert unit.count(1, 0) != unit.count(1, 1) or not np.array_equal(
        unit.table.bounds(1, 0), unit.table.bounds(1, 1))  # a new merge every epoch

    limits = dict(batch_size=None, batching=MaxDuration(2.0, max_samples=3))
    full = _pipe(folder, **limits)
    full.set_epoch(1)
    want = _collect(full)
    assert len(want) > 2
    pipe = _pipe(folder, **limits)
    pipe.set_epoch(1)
    first = next(iter(pipe))
    state = pipe.state_dict()
    assert state["epoch"] == 1 and state["position"] == len(first["index"])
    again = _pipe(folder, **limits)
    again.load_state_dict(state)
    rest = _collect(again)
    assert [b["index"].tolist() for b in rest] == [b["index"].tolist() for b in want[1:]]
    for got, expected in zip(rest, want[1:], strict=True):
        assert (got["audio"] == expected["audio"]).all()
        assert got["audio_segment"] == expected["audio_segment"]
    with pytest.raises(ValueError, match="longer than max_duration"):
        _pipe(folder, batch_size=None, batching=MaxDuration(0.8, max_samples=3))
    with pytest.raises(ValueError, match="needs unit='segment'"):
        Pipeline(folder, 2, fields={"audio": AudioOptions(unit="recording", merge=(0.5, 1.0))})
    with pytest.raises(ValueError, match="min_s 2.0 > max_s 1.0"):
        _pipe(folder, merge=(2, 1))
