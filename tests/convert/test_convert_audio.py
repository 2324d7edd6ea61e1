"""`convert_audio`: chute/convert/_convert_audio.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chute.convert import AudioConvertOptions, convert_audio, update_metadata
from chute.errors import ChuteError, FormatError
from chute.readers import open_dataset
from tests._audio import RECORDINGS, pcm_of, write_recordings

pytest.importorskip("soundfile")


def _options(**kwargs):
    return AudioConvertOptions(workers=1, progress=False, **kwargs)


def test_recordings_stored_once_with_probed_columns(tmp_path):
    jsonl = write_recordings(tmp_path)
    report = convert_audio(jsonl, tmp_path / "ds", _options())
    assert (report.written, report.segments, report.skipped) == (4, 12, [])
    ds = open_dataset(tmp_path / "ds")
    for i, name in enumerate(RECORDINGS):
        _, rate, channels, seconds = RECORDINGS[name]
        sample = ds[i]
        assert bytes(sample["audio"]) == (tmp_path / name).read_bytes()
        assert (sample["sample_rate"], sample["channels"]) == (rate, channels)
        assert sample["num_frames"] == len(pcm_of(name))
        assert sample["duration"] == pytest.approx(seconds)
        assert sample["meta"]["key"] == name and len(sample["meta"]["segments"]) == 3
    # overlapping segments cost nothing: the payload is the files' bytes
    payload = sum((tmp_path / n).stat().st_size for n in RECORDINGS)
    assert (tmp_path / "ds").joinpath("00000", "audio.bin").stat().st_size == payload


def test_bad_files_and_segments_skipped_listed_and_counted(tmp_path):
    jsonl = write_recordings(tmp_path, names=("a.wav", "b.flac"), segments=lambda name: [
        {"start": 0.1, "end": 0.2}, {"start": 0.5, "end": 9.0}, {"start": -1, "end": 0.1}])
    (tmp_path / "junk.wav").write_bytes(b"not audio at all")
    with open(jsonl, "a") as f:
        f.write(json.dumps({"path": "junk.wav"}) + "\n")
    report = convert_audio(jsonl, tmp_path / "ds", _options())
    assert report.written == 2 and report.dropped_segments == 4
    listed = (tmp_path / "ds" / "skipped.tsv").read_text()
    assert "junk.wav\tcannot decode" in listed
    assert "a.wav#segment1\tends at 9.0 s, past the end" in listed
    assert "b.flac#segment2\tnegative start" in listed
    assert open_dataset(tmp_path / "ds").manifest["source"]["dropped_segments"] == 4
    with pytest.raises(ChuteError, match="junk.wav|segment1"):
        convert_audio(jsonl, tmp_path / "strict", _options(strict=True))


def test_meta_update_replaces_segments_without_touching_audio(tmp_path):
    jsonl = write_recordings(tmp_path, names=("a.wav",))
    convert_audio(jsonl, tmp_path / "ds", _options())
    audio = (tmp_path / "ds" / "00000" / "audio.bin").read_bytes()
    new = {"key": "a.wav", "txt": "new", "segments": [{"start": 0, "end": 1, "txt": "x"}]}
    (tmp_path / "new.jsonl").write_text(json.dumps(new) + "\n")
    update_metadata(tmp_path / "ds", tmp_path / "new.jsonl")
    ds = open_dataset(tmp_path / "ds")
    assert ds[0]["meta"]["segments"] == new["segments"]
    assert (tmp_path / "ds" / "00000" / "audio.bin").read_bytes() == audio
    assert np.asarray(ds.column("num_frames")).tolist() == [24000]


def test_meta_update_checks_segments_as_convert_does(tmp_path):
    # issue 27 item 13: an update could list a segment past the end of its recording, and the
    # Pipeline then refused to build the dataset at all, even with on_error="skip"
    from chute.pipelines import AudioOptions, Pipeline

    jsonl = write_recordings(tmp_path, names=("a.wav", "b.flac"))
    convert_audio(jsonl, tmp_path / "ds", _options())
    segments = [{"start": 0.2, "end": 0.9, "txt": "ok"},
                {"start": 1.2, "end": 1.8, "txt": "past the end of a.wav (1.5 s)"},
                {"start": 0.7, "end": 0.4, "txt": "reversed"},
                {"start": 1.0, "end": 1.5, "txt": "to the last frame"}]
    new = {"key": "a.wav", "txt": "new", "segments": segments}
    (tmp_path / "new.jsonl").write_text(json.dumps(new) + "\n")
    before = open_dataset(tmp_path / "ds")[0]["meta"]
    with pytest.raises(ChuteError, match=r"segment a.wav#segment1: ends at 1.8 s, past the end"
                                         r".*2 segment\(s\).*without --strict"):
        update_metadata(tmp_path / "ds", tmp_path / "new.jsonl", strict=True)
    assert open_dataset(tmp_path / "ds")[0]["meta"] == before  # nothing written
    result = update_metadata(tmp_path / "ds", tmp_path / "new.jsonl")
    assert [w for w, _ in result.dropped] == ["a.wav#segment1", "a.wav#segment2"]
    assert "not after start" in result.dropped[1][1]
    assert open_dataset(tmp_path / "ds")[0]["meta"]["segments"] == [segments[0], segments[3]]
    pipe = Pipeline(tmp_path / "ds", 8, fields={"audio": AudioOptions(unit="segment")},
                    augment="eval", order="sequential")
    got = [seg for batch in pipe for seg in batch["audio_segment"]]
    assert [(s["key"], s["txt"]) for s in got[:2]] == [("a.wav", "ok"),
                                                       ("a.wav", "to the last frame")]
    assert len(got) == 2 + 3  # b.flac's three segments untouched
    (tmp_path / "obj.jsonl").write_text(json.dumps({"key": "b.flac", "segments": {}}) + "\n")
    with pytest.raises(ChuteError, match=r"'b.flac' has \"segments\" of type dict"):
        update_metadata(tmp_path / "ds", tmp_path / "obj.jsonl")


def test_a_recording_listed_twice_is_stored_once_with_every_listings_segments(tmp_path):
    # issue 27 item 15: a WeNet data.list / utterance-per-line JSONL lists a file per utterance
    from chute.pipelines import AudioOptions, Pipeline

    write_recordings(tmp_path, names=("a.wav", "b.flac"))
    lines = [{"key": "u1", "wav": "a.wav", "txt": "one", "start": 0.1, "end": 0.6},
             {"key": "u2", "wav": "b.flac", "txt": "whole b"},
             {"key": "u3", "wav": "a.wav", "txt": "three", "start": 0.5, "end": 1.5},
             {"key": "u4", "wav": "b.flac", "txt": "b again", "speaker": "s4"}]
    (tmp_path / "data.list").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = convert_audio(tmp_path / "data.list", tmp_path / "ds", _options())
    assert (report.written, report.segments, report.skipped) == (2, 4, [])
    ds = open_dataset(tmp_path / "ds")
    assert [bytes(ds[i]["audio"]) for i in range(2)] == [
        (tmp_path / n).read_bytes() for n in ("a.wav", "b.flac")]
    assert ds[0]["meta"]["key"] == "u1" and ds[1]["meta"]["segments"] == [
        {"key": "u2", "start": 0.0, "end": 2.0, "txt": "whole b"},
        {"key": "u4", "start": 0.0, "end": 2.0, "txt": "b again", "speaker": "s4"}]
    pipe = Pipeline(tmp_path / "ds", 4, fields={"audio": AudioOptions(unit="segment")},
                    augment="eval", order="sequential")
    (batch,) = list(pipe)
    assert [(s["key"], s["txt"], s["start"], s["end"]) for s in batch["audio_segment"]] == [
        ("u1", "one", 0.1, 0.6), ("u3", "three", 0.5, 1.5), ("u2", "whole b", 0.0, 2.0),
        ("u4", "b again", 0.0, 2.0)]
    assert batch["audio_lengths"].tolist() == [8000, 16000, 32000, 32000]
    (tmp_path / "rates.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [
        {"wav": "a.wav", "sample_rate": 16000}, {"wav": "a.wav", "sample_rate": 8000}]))
    # nothing stored: refused in one line naming the first problem, no empty dataset left
    with pytest.raises(ChuteError, match=r"none of its 1 recordings could be stored .*"
                                         r"different sample rates \[8000, 16000\]"):
        convert_audio(tmp_path / "rates.jsonl", tmp_path / "r", _options())
    assert not (tmp_path / "r").exists()


def _kaldi_folder(tmp_path):
    """A Kaldi data folder over a.wav and b.flac: a.wav listed twice under two recording ids
    (stored once), utterances with speakers, an end of -1, one recording without any."""
    write_recordings(tmp_path, names=("a.wav", "b.flac", "c.flac"))
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "wav.scp").write_text(f"recA {tmp_path / 'a.wav'}\nrecB b.flac\n"
                                  f"recA2 {tmp_path / 'a.wav'}\nrecC c.flac\n")
    (data / "segments").write_text("uA1 recA 0.10 0.60\nuB1 recB 0.25 1.00\n"
                                   "uB2 recB 1.50 -1\nuA2 recA2 0.50 1.20\n")
    (data / "text").write_text("uA1 hello  there\nuB1 good morning\nuB2\nuA2 again\n")
    (data / "utt2spk").write_text("uA1 spk1\nuB1 spk2\nuB2 spk2\nuA2 spk1\n")
    return data


def test_kaldi_data_folder_converts_each_file_once_with_its_utterances(tmp_path):
    # issue 27 item 15: Kaldi data folders (wav.scp, segments, text, utt2spk)
    from chute.pipelines import AudioOptions, Pipeline

    data = _kaldi_folder(tmp_path)
    report = convert_audio(data, tmp_path / "ds", _options(root=tmp_path))
    assert (report.written, report.segments, report.skipped) == (3, 4, [])
    ds = open_dataset(tmp_path / "ds")
    assert [ds[i]["meta"]["key"] for i in range(3)] == ["recA", "recB", "recC"]
    assert bytes(ds[0]["audio"]) == (tmp_path / "a.wav").read_bytes()
    assert ds[0]["meta"]["segments"] == [
        {"key": "uA1", "start": 0.1, "end": 0.6, "txt": "hello  there", "speaker": "spk1"},
        {"key": "uA2", "start": 0.5, "end": 1.2, "txt": "again", "speaker": "spk1"}]
    assert ds[1]["meta"]["segments"][1] == {"key": "uB2", "start": 1.5, "end": 2.0, "txt": "",
                                            "speaker": "spk2"}
    assert ds[2]["meta"]["segments"] == []
    pipe = Pipeline(tmp_path / "ds", 8, augment="eval", order="sequential",
                    fields={"audio": AudioOptions(unit="segment", sample_rate=16000)})
    (batch,) = list(pipe)
    assert [s["key"] for s in batch["audio_segment"]] == ["uA1", "uA2", "uB1", "uB2"]
    assert batch["audio_lengths"].tolist() == [8000, 11200, 12000, 8000]


@pytest.mark.parametrize("name, content, message", [
    ("wav.scp", "r1 sox x.wav -t wav - |\n", r"wav.scp, line 1: recording 'r1' is a command"),
    ("wav.scp", "r1 raw.ark:1234\n", r"inside a Kaldi archive"),
    ("wav.scp", "r1\n", r"recording 'r1' names no file"),
    ("segments", "u1 nowhere 0 1\n", r"segments, line 1: .*'nowhere', which wav.scp does not"),
    ("segments", "u1 r1 zero 1\n", r"segments, line 1: 'zero' is not a time"),
    ("segments", "u1 r1 0\n", r"segments, line 1: 3 fields, expected 4"),
    ("text", "u1 a\nu1 b\n", r"text, line 2: id 'u1' appears twice"),
])
def test_kaldi_folder_errors_name_the_file_and_line(tmp_path, name, content, message):
    from chute.convert._audio_kaldi import list_kaldi

    (tmp_path / "wav.scp").write_text("r1 a.wav\n")
    (tmp_path / name).write_text(content)
    with pytest.raises(FormatError, match=message):
        list_kaldi(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChuteError, match="empty: a folder without wav.scp"):
        convert_audio(tmp_path / "empty", tmp_path / "ds", _options())


def test_kaldi_tables_with_a_byte_order_mark_keep_their_first_id(tmp_path):
    # a BOM at the start of wav.scp (or text) joined the first id ("\ufeffrecA"): the
    # segments naming recA were refused as naming a recording wav.scp does not list
    from chute.convert._audio_kaldi import list_kaldi

    data = _kaldi_folder(tmp_path)
    for name in ("wav.scp", "text"):
        (data / name).write_text((data / name).read_text(), encoding="utf-8-sig")
    sources = list_kaldi(data, root=tmp_path)
    assert [s.key for s in sources] == ["recA", "recB", "recC"]
    assert [(s["key"], s["txt"]) for s in sources[0].segments] == [
        ("uA1", "hello  there"), ("uA2", "again")]


def _lhotse_recording(tmp_path, name, rid):
    _, rate, channels, seconds = RECORDINGS[name]
    return {"id": rid, "sources": [{"type": "file", "channels": list(range(channels)),
                                    "source": str(tmp_path / name)}],
            "sampling_rate": rate, "num_samples": round(rate * seconds), "duration": seconds,
            "channel_ids": list(range(channels))}


def _write_jsonl(path, rows, encoding="utf-8"):
    import gzip

    text = "".join(json.dumps(r) + "\n" for r in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding=encoding) as f:
            f.write(text)
    else:
        path.write_text(text, encoding=encoding)
    return path


def test_lhotse_recordings_and_supervisions_manifests(tmp_path):
    # issue 27 item 15: lhotse manifests (gzipped JSONL, as lhotse writes them)
    write_recordings(tmp_path, names=("a.wav", "b.flac"))
    recs = _write_jsonl(tmp_path / "recordings.jsonl.gz", [
        _lhotse_recording(tmp_path, "a.wav", "A"), _lhotse_recording(tmp_path, "b.flac", "B")])
    sups = _write_jsonl(tmp_path / "supervisions.jsonl.gz", [
        {"id": "B-1", "recording_id": "B", "start": 0.5, "duration": 1.0, "channel": 0,
         "text": "bee", "speaker": "s2", "language": "en"},
        {"id": "A-1", "recording_id": "A", "start": 0.25, "duration": 0.5, "channel": 0,
         "text": "ay", "custom": {"emotion": "calm"}},
        {"id": "A-2", "recording_id": "A", "start": 1.0, "duration": 0.6, "text": "past"}])
    report = convert_audio(recs, tmp_path / "ds", _options(supervisions=sups))
    assert (report.written, report.segments, report.dropped_segments) == (2, 2, 1)
    assert [w for w, _ in report.skipped] == [f"{tmp_path / 'a.wav'}#segment1 (A-2)"]
    ds = open_dataset(tmp_path / "ds")
    assert ds[0]["meta"]["key"] == "A" and ds[0]["meta"]["segments"] == [
        {"key": "A-1", "start": 0.25, "end": 0.75, "txt": "ay", "channel": 0,
         "custom": {"emotion": "calm"}}]
    assert ds[1]["meta"]["segments"] == [{"key": "B-1", "start": 0.5, "end": 1.5, "txt": "bee",
                                          "channel": 0, "speaker": "s2", "language": "en"}]
    whole = convert_audio(recs, tmp_path / "whole", _options())  # no supervisions
    assert (whole.written, whole.segments) == (2, 2)
    with pytest.raises(FormatError, match="supervisions manifest goes with its recordings"):
        convert_audio(sups, tmp_path / "x", _options())
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"id": "Z-1", "recording_id": "Z",
                                                 "start": 0, "duration": 1}])
    with pytest.raises(FormatError, match=r"bad.jsonl, line 1: supervision of recording 'Z'"):
        convert_audio(recs, tmp_path / "x", _options(supervisions=bad))
    url = dict(_lhotse_recording(tmp_path, "a.wav", "U"),
               sources=[{"type": "url", "channels": [0], "source": "https://x/a.wav"}])
    with pytest.raises(FormatError, match=r"line 1: recording 'U' is a 'url' source"):
        convert_audio(_write_jsonl(tmp_path / "u.jsonl", [url]), tmp_path / "x", _options())


def test_lhotse_cuts_manifest_each_cut_a_segment_of_its_recording_stored_once(tmp_path):
    write_recordings(tmp_path, names=("b.flac",))
    rec = _lhotse_recording(tmp_path, "b.flac", "B")
    sup = {"id": "s", "recording_id": "B", "start": 0.1, "duration": 0.3, "text": "hello"}
    cuts = _write_jsonl(tmp_path / "cuts.jsonl", [
        {"id": "c1", "start": 0.0, "duration": 1.0, "channel": 0, "supervisions": [sup],
         "recording": rec, "type": "MonoCut"},
        {"id": "c2", "start": 1.0, "duration": 0.75, "channel": 0,
         "supervisions": [dict(sup, text="world"), dict(sup, text="again")], "recording": rec,
         "type": "MonoCut"}])
    report = convert_audio(cuts, tmp_path / "ds", _options())
    assert (report.written, report.segments, report.skipped) == (1, 2, [])
    (meta,) = [open_dataset(tmp_path / "ds")[0]["meta"]]
    assert bytes(open_dataset(tmp_path / "ds")[0]["audio"]) == (tmp_path / "b.flac").read_bytes()
    assert [(s["key"], s["start"], s["end"], s["txt"]) for s in meta["segments"]] == [
        ("c1", 0.0, 1.0, "hello"), ("c2", 1.0, 1.75, "world again")]
    assert meta["segments"][1]["supervisions"][0]["start"] == 0.1  # relative, as lhotse has it


@pytest.mark.parametrize("name", ["recordings.jsonl", "recordings.jsonl.gz"])
def test_lhotse_manifests_with_a_byte_order_mark_are_read(tmp_path, name):
    # a manifest starting with a UTF-8 byte order mark was "not a lhotse recordings or cuts
    # manifest" (its first line failed to parse); CSV listings accept one
    write_recordings(tmp_path, names=("a.wav",))
    recs = _write_jsonl(tmp_path / name, [_lhotse_recording(tmp_path, "a.wav", "A")],
                        encoding="utf-8-sig")
    sups = _write_jsonl(tmp_path / "supervisions.jsonl", [
        {"id": "A-1", "recording_id": "A", "start": 0.25, "duration": 0.5, "text": "ay"}],
        encoding="utf-8-sig")
    report = convert_audio(recs, tmp_path / "ds", _options(supervisions=sups))
    assert (report.written, report.segments, report.skipped) == (1, 1, [])
    (meta,) = [open_dataset(tmp_path / "ds")[0]["meta"]]
    assert meta["key"] == "A" and [(s["key"], s["txt"]) for s in meta["segments"]] == [
        ("A-1", "ay")]
