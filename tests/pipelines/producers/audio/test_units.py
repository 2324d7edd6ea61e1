"""Sample units (chute/pipelines/producers/audio/_units.py) and
`AudioOptions(unit="segment")`: order, partition, resume and substitution over segments
addressed through prefix sums."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from chute.convert import update_metadata
from chute.errors import DecodeError, FormatError
from chute.pipelines import AudioOptions, Pipeline
from chute.pipelines.producers.audio._units import sample_unit
from chute.readers import open_dataset
from tests._audio import RECORDINGS, convert_recordings, pcm_of, segments_of

pytest.importorskip("soundfile")
pytest.importorskip("soxr")
NAMES = list(RECORDINGS)
SEGMENTS = {"audio": AudioOptions(unit="segment", sample_rate=16000)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return convert_recordings(tmp_path_factory.mktemp("units"))


def test_segment_ids_map_to_recording_and_frames(folder):
    ds = open_dataset(folder)
    unit = sample_unit(ds, "segment")
    assert unit.n == 12 and unit.first.tolist() == [0, 3, 6, 9, 12]
    params = unit(0, 0, np.array([11, 0, 4, 7]))
    assert params["recording"].tolist() == [3, 0, 1, 2]
    assert params["segment"].tolist() == [2, 0, 1, 1]
    for k, rec, seg in ((0, 3, 2), (1, 0, 0), (2, 1, 1), (3, 2, 1)):
        rate = RECORDINGS[NAMES[rec]][1]
        s = segments_of(NAMES[rec])[seg]
        assert params["start_frame"][k] == round(s["start"] * rate)
        assert params["stop_frame"][k] == round(s["end"] * rate)
    whole = sample_unit(ds, "recording")(0, 0, np.array([2]))
    assert whole["stop_frame"].tolist() == [len(pcm_of("c.flac"))]
    with pytest.raises(ValueError, match="unit must be"):
        sample_unit(ds, "word")


def test_broken_segments_in_stored_metadata_raise_naming_them(tmp_path):
    # metadata written before `chute meta update` checked segments (it now drops these)
    from chute.convert._meta_update import _rewrite

    folder = convert_recordings(tmp_path, names=("a.wav", "b.flac"))
    bad = {"key": "b.flac", "segments": [{"start": 0, "end": 1}, {"start": 1.5, "end": 1.2}]}
    ds = open_dataset(folder)
    _rewrite(ds, "meta", [ds[0]["meta"], bad])
    with pytest.raises(FormatError, match=r"recording 1 \('b.flac'\).*segment 1.*not after"):
        Pipeline(folder, 4, fields=SEGMENTS)


def _epoch(folder, rank=0, world=1, **kwargs):
    pipe = Pipeline(folder, 2, rank=rank, world_size=world,
                    fields={**SEGMENTS, "meta": None, "sample_rate": None}, **kwargs)
    return pipe, _collect(pipe)


def _collect(pipe) -> list[dict]:
    """Every batch of an epoch, copied out of the slots that later batches reuse."""
    return [{k: (v.clone() if hasattr(v, "clone") else v) for k, v in b.items()} for b in pipe]


def test_segment_batches_carry_their_recordings_fields(folder):
    pipe, batches = _epoch(folder, augment="eval")
    assert len(pipe) == 6 and pipe._n == 12  # 12 segments, all delivered: the next epoch's
    assert (pipe.state_dict()["epoch"], pipe.state_dict()["position"]) == (1, 0)  # state
    seen = np.concatenate([b["index"].numpy() for b in batches])
    assert sorted(seen.tolist()) == list(range(12))
    for b in batches:
        for row, k in enumerate(b["index"].tolist()):
            rec = k // 3  # three segments per recording
            assert b["meta"][row]["key"] == NAMES[rec]
            assert int(b["sample_rate"][row]) == RECORDINGS[NAMES[rec]][1]
            seg = segments_of(NAMES[rec])[k % 3]
            assert int(b["audio_lengths"][row]) == round((seg["end"] - seg["start"]) * 16000)
            assert b["audio_segment"][row]["txt"] == seg["txt"]
            assert b["audio_segment"][row]["start"] == pytest.approx(seg["start"], abs=1e-4)


def test_ranks_take_disjoint_segments_and_resume_is_exact(folder):
    parts = [np.concatenate([b["index"].numpy() for b in _epoch(folder, r, 2)[1]])
             for r in range(2)]
    assert not set(parts[0]) & set(parts[1]) and len(parts[0]) == len(parts[1]) == 6
    pipe, full = _epoch(folder)
    resumed = Pipeline(folder, 2, fields=SEGMENTS)
    run = iter(resumed)
    next(run)
    state = resumed.state_dict()
    assert state["position"] == 2
    again = Pipeline(folder, 2, fields=SEGMENTS)
    again.load_state_dict(state)
    rest = _collect(again)
    assert len(rest) == len(full) - 1
    for got, want in zip(rest, full[1:], strict=True):
        assert got["index"].tolist() == want["index"].tolist()
        assert (got["audio"] == want["audio"]).all()


def test_a_failing_segment_is_substituted_or_raised_naming_it(tmp_path):
    folder = convert_recordings(tmp_path, names=("a.wav", "b.flac"))
    audio = folder / "00000" / "audio.bin"
    raw = bytearray(audio.read_bytes())
    start = (tmp_path / "a.wav").stat().st_size  # b.flac follows a.wav
    middle = start + (tmp_path / "b.flac").stat().st_size // 2
    raw[middle:middle + 400] = bytes(400)
    audio.write_bytes(bytes(raw))
    with pytest.raises(DecodeError, match=r"segment 2 of recording 1"):
        list(Pipeline(folder, 6, fields=SEGMENTS, on_error="raise", augment="eval"))
    pipe = Pipeline(folder, 6, fields=SEGMENTS, augment="eval")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (batch,) = list(pipe)
    assert pipe.stats.decode_errors == 1 and 5 not in batch["index"].tolist()
    assert "segment 2 of recording 1" in str(caught[0].message)


def test_an_end_rounded_past_the_last_frame_means_the_last_frame(tmp_path):
    # transcripts round timestamps (here to 10 ms and 1 ms): a last segment ending a few ms
    # after the recording is its end, exactly as soundfile.read(stop=round(end*sr)) reads it;
    # one further past is dropped at conversion and raises after a metadata update
    import soundfile as sf

    from chute.convert import AudioConvertOptions, convert_audio

    rate, frames = 16000, 19752  # 1.2345 s
    samples = (np.random.default_rng(3).standard_normal(frames) * 3000).astype(np.int16)
    sf.write(tmp_path / "r.flac", samples, rate, format="FLAC", subtype="PCM_16")
    segments = [{"start": 0.5, "end": 1.24, "txt": "a"}, {"start": 1.0, "end": 1.235, "txt": "b"},
                {"start": 1.0, "end": 1.25, "txt": "past"}]
    (tmp_path / "r.jsonl").write_text(json.dumps({"key": "r", "path": "r.flac",
                                                  "info": {"segments": segments}}) + "\n")
    report = convert_audio(tmp_path / "r.jsonl", tmp_path / "ds",
                           AudioConvertOptions(workers=1, progress=False))
    assert report.segments == 2 and [w for w, _ in report.skipped] == [
        f"{tmp_path / 'r.flac'}#segment2"]
    (batch,) = list(Pipeline(tmp_path / "ds", 2, fields={"audio": AudioOptions(unit="segment")},
                             augment="eval"))
    for row, seg in enumerate(segments[:2]):
        want = sf.read(tmp_path / "r.flac", start=round(seg["start"] * rate),
                       stop=round(seg["end"] * rate), dtype="float32")[0]
        assert int(batch["audio_lengths"][row]) == len(want)
        np.testing.assert_array_equal(batch["audio"][row, :len(want)].numpy(), want)
        assert batch["audio_segment"][row]["end"] == seg["end"]  # as listed, not snapped
    (tmp_path / "u.jsonl").write_text(json.dumps({"key": "r", "segments": segments}) + "\n")
    assert update_metadata(tmp_path / "ds", tmp_path / "u.jsonl").dropped == [
        ("r#segment2", "ends at 1.25 s, past the end of the recording (1.234500 s)")]
    from chute.convert._meta_update import _rewrite  # as written before updates were checked

    _rewrite(open_dataset(tmp_path / "ds"), "meta", [{"key": "r", "segments": segments}])
    with pytest.raises(FormatError, match=r"recording 0 \('r'\).*segment 2.*past the end"):
        Pipeline(tmp_path / "ds", 2, fields={"audio": AudioOptions(unit="segment")})


def _segments_with_fields(name: str) -> list[dict]:
    """segments_of with a speaker, a second transcript and its own key per segment."""
    return [{**seg, "speaker": f"spk{i}", "txt_en": f"en {i}", "utt": f"{name}-{i}"}
            for i, seg in enumerate(segments_of(name))]


def test_a_segment_is_delivered_as_its_own_record_with_its_index(tmp_path):
    # issue 27 item 14: per-segment fields were dropped, there was no segment index, and
    # start/end came back snapped to frames (0.35 s is frame 7717.5 at 22050 Hz)
    folder = convert_recordings(tmp_path, segments=_segments_with_fields)
    pipe = Pipeline(folder, 4, fields=SEGMENTS, augment="eval", order="sequential")
    got = [seg for b in pipe for seg in b["audio_segment"]]
    want = [{**seg, "key": name, "recording_key": name, "index": i}
            for name in NAMES for i, seg in enumerate(_segments_with_fields(name))]
    assert got == want
    assert got[7]["start"] == 0.35 and got[7]["start"] * 22050 != round(0.35 * 22050)


def test_a_producer_planning_ahead_reads_the_recordings_of_a_segment_plan(tmp_path):
    # the cpu image backend gathers batches ahead from the plan: through a segment unit it
    # must gather the recordings' rows the reads ask for, not the segment ids
    from dataclasses import dataclass

    from chute.pipelines import BatchRequest, ImageSpec, create_producer
    from chute.pipelines.producers._by_row import ByRow
    from tests.pipelines._dali_data import write_jpeg_dataset

    dataset = open_dataset(write_jpeg_dataset(tmp_path / "ds.chute", n=8))

    @dataclass
    class SegmentPlan:  # segment ids far past the dataset's rows, two segments per recording
        batches: int = 3

        def request(self, i: int) -> BatchRequest:
            rows = np.array([2 * i, 2 * i, 2 * i + 1], np.int64)
            h, w = (np.asarray(dataset.column(c))[rows] for c in ("height", "width"))
            boxes = np.stack([np.zeros(3), np.zeros(3), h, w], axis=1).astype(np.float64)
            return BatchRequest(i, np.array([100 + i, 200 + i, 300 + i]),
                                {"recording": rows, "boxes": boxes,
                                 "flips": np.zeros(3, bool)})

        def __len__(self) -> int:
            return self.batches

    spec = ImageSpec("cpu", "image", dataset, 3, "cpu", options={"threads": 1}, size=(8, 8),
                     dtype="uint8", layout="NHWC")
    wrapped, plain = ByRow(create_producer(spec), "recording"), create_producer(spec)
    plan = SegmentPlan()
    epoch = wrapped.open_epoch(plan, 0)
    try:
        for i in range(len(plan)):
            request = plan.request(i)
            got, want = np.zeros((3, 8, 8, 3), np.uint8), np.zeros((3, 8, 8, 3), np.uint8)
            assert epoch.read(request, {"image": got}).tolist() == [0, 0, 0]
            plain.fill(wrapped.rows(request), {"image": want})
            np.testing.assert_array_equal(got, want)
    finally:
        epoch.close()
        wrapped.close()
        plain.close()
