"""Listing recordings (JSONL, CSV) and probing them: chute/convert/_audio_sources.py."""

from __future__ import annotations

import json

import pytest

from chute.convert._audio_sources import (
    AudioSource,
    check_segments,
    list_audio_csv,
    list_audio_jsonl,
    probe_audio,
)
from chute.errors import FormatError
from tests._audio import RECORDINGS, pcm_of, write_recordings

pytest.importorskip("soundfile")


def test_check_segments_names_each_problem():
    segments = [{"start": 0, "end": 1}, {"start": -0.1, "end": 0.5}, {"start": 0.5, "end": 0.5},
                {"start": 0.8, "end": 0.2}, {"start": 0.5, "end": 1.01}, {"start": "x"}]
    problems = check_segments(segments, 100, 100)
    assert problems[0] is None
    assert "negative start" in problems[1]
    assert "not after start" in problems[2] and "not after start" in problems[3]
    assert "past the end" in problems[4]
    assert "numeric" in problems[5]


def test_jsonl_listing_and_probe(tmp_path):
    jsonl = write_recordings(tmp_path)
    sources = list_audio_jsonl(jsonl)
    assert [s.key for s in sources] == list(RECORDINGS)
    assert sources[0].info == {"speaker": "a"} and len(sources[0].segments) == 3
    probed = probe_audio(sources[2])
    assert (probed.sample_rate, probed.channels) == (22050, 2)
    assert probed.num_frames == len(pcm_of("c.flac"))
    assert probed.data == (tmp_path / "c.flac").read_bytes()  # stored as it is
    assert not probed.dropped


def test_probe_refuses_rate_mismatch_corrupt_and_missing(tmp_path):
    write_recordings(tmp_path, names=("b.flac",))
    source = AudioSource(tmp_path / "b.flac", "b", sample_rate=44100)
    assert "sample_rate 44100" in probe_audio(source)
    raw = bytearray((tmp_path / "b.flac").read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 300] = bytes(300)  # a corrupt frame in the middle
    (tmp_path / "bad.flac").write_bytes(bytes(raw))
    assert "decode" in probe_audio(AudioSource(tmp_path / "bad.flac", "bad"))
    assert "cannot read" in probe_audio(AudioSource(tmp_path / "none.wav", "none"))


def test_probe_refuses_a_truncated_wav_that_libsndfile_reads_short(tmp_path):
    write_recordings(tmp_path, names=("a.wav",))
    raw = (tmp_path / "a.wav").read_bytes()
    (tmp_path / "half.wav").write_bytes(raw[:len(raw) // 2])  # a copy cut off mid-way
    why = probe_audio(AudioSource(tmp_path / "half.wav", "half"))
    assert isinstance(why, str) and why.startswith("truncated WAV")
    assert str(len(raw) - 44) in why  # the declared size (after the 44-byte header)
    # a whole file, and one streamed with an unknown (0xFFFFFFFF) size, are kept
    assert not isinstance(probe_audio(AudioSource(tmp_path / "a.wav", "a")), str)
    data_at = raw.index(b"data") + 4
    streamed = raw[:data_at] + b"\xff\xff\xff\xff" + raw[data_at + 4:]
    (tmp_path / "streamed.wav").write_bytes(streamed)
    assert not isinstance(probe_audio(AudioSource(tmp_path / "streamed.wav", "s")), str)
    # short of less than one frame (2 bytes of 16-bit mono): no frame lost, kept
    (tmp_path / "pad.wav").write_bytes(raw[:-1])
    assert not isinstance(probe_audio(AudioSource(tmp_path / "pad.wav", "p")), str)


def test_a_file_libsndfile_cannot_open_is_reported_without_a_buffer_repr(tmp_path):
    write_recordings(tmp_path, names=("a.wav",))
    raw = (tmp_path / "a.wav").read_bytes()
    (tmp_path / "bad.wav").write_bytes(raw[:12] + b"junk" * 8)  # RIFF WAVE, no fmt chunk
    why = probe_audio(AudioSource(tmp_path / "bad.wav", "bad"))
    assert why.startswith("cannot decode it as audio: ") and "BytesIO" not in why


def test_csv_listing_one_segment_spanning_the_file(tmp_path):
    write_recordings(tmp_path, names=("a.wav",))
    (tmp_path / "list.csv").write_text("path,text\na.wav,hello\n")
    (source,) = list_audio_csv(tmp_path / "list.csv")
    probed = probe_audio(source)
    assert probed.segments == [{"start": 0.0, "end": 1.5, "txt": "hello"}]


def test_bad_listing_lines_raise_naming_the_line(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"path": "a.wav"}) + "\n{\"key\": 1}\n")
    with pytest.raises(FormatError, match="line 2"):
        list_audio_jsonl(tmp_path / "x.jsonl")


def test_csv_without_header_or_with_a_byte_order_mark(tmp_path):
    # `path,text` rows as they come: no header row, or a header after a UTF-8 byte order mark
    # (spreadsheet exports); texts with commas are quoted
    write_recordings(tmp_path, names=("a.wav", "b.flac"))
    (tmp_path / "bare.csv").write_text('a.wav,"hello, world"\nb.flac,bye\n', encoding="utf-8")
    sources = list_audio_csv(tmp_path / "bare.csv")
    assert [(s.path, s.key, s.txt) for s in sources] == [
        (tmp_path / "a.wav", "a.wav", "hello, world"), (tmp_path / "b.flac", "b.flac", "bye")]
    (tmp_path / "bom.csv").write_text("path,text\nb.flac,bye\n", encoding="utf-8-sig")
    (source,) = list_audio_csv(tmp_path / "bom.csv")
    assert (source.path, source.txt) == (tmp_path / "b.flac", "bye")
    (tmp_path / "three.csv").write_text("a.wav,x,y\n")
    with pytest.raises(FormatError, match="line 1: 3 cells"):
        list_audio_csv(tmp_path / "three.csv")
    (tmp_path / "named.csv").write_text("file,text\na.wav,x\n")
    with pytest.raises(FormatError, match="needs a `path` column"):
        list_audio_csv(tmp_path / "named.csv")


def test_huge_times_and_a_segments_object_are_reported_not_raised(tmp_path):
    # 1e308 s is a finite float whose frame number is not: it must be a listed problem, not an
    # OverflowError ending the whole conversion
    problems = check_segments([{"start": 0, "end": 1e308}, {"start": -1e308, "end": 1}], 16000,
                              100)
    assert all("finite numeric start and end" in p for p in problems)
    write_recordings(tmp_path, names=("a.wav",))
    source = AudioSource(tmp_path / "a.wav", "a", segments={"start": 0, "end": 1})
    assert "not a list" in probe_audio(source)


def test_a_record_naming_its_file_wav_is_listed_like_path(tmp_path):
    # issue 27 item 14: the TouchDataset / WeNet shape {"key", "wav", "txt"} raised KeyError
    write_recordings(tmp_path, names=("a.wav",))
    segments = [{"start": 0.1, "end": 0.6, "txt": "one", "speaker": "s1", "txt_en": "uno"}]
    record = {"key": "utt-a", "wav": "a.wav", "txt": "all", "sample_rate": 16000,
              "language": "en", "segments": segments}
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    (source,) = list_audio_jsonl(tmp_path / "t.jsonl")
    assert (source.path, source.key, source.txt) == (tmp_path / "a.wav", "utt-a", "all")
    assert source.segments == segments and source.info == {"language": "en"}
    assert probe_audio(source).segments == segments
    (tmp_path / "bad.jsonl").write_text(json.dumps({"key": "x", "audio": "a.wav"}) + "\n")
    with pytest.raises(FormatError, match=r'bad.jsonl, line 1: names no audio file; .*"wav"'):
        list_audio_jsonl(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("line", ['{"path": "a.wav", "x": ' + "[" * 100_000 + "]" * 100_000
                                  + "}",
                                  '{"path": "a.wav", "sample_rate": Infinity}',
                                  '{"path": "a.wav", "sample_rate": 16000.5}',
                                  '{"path": "a.wav", "sample_rate": true}',
                                  '{"path": "a.wav", "sample_rate": ' + "9" * 5000 + "}"])
def test_hostile_numbers_and_nesting_are_one_line_naming_the_line(tmp_path, line):
    """Found by tests/robustness/test_audio_listings.py (issue 26 item 16): deep nesting was a
    raw RecursionError, an infinite sample rate a raw OverflowError; 16000.5 was truncated to
    16000 and `true` read as 1 without a word."""
    (tmp_path / "x.jsonl").write_text(line + "\n")
    with pytest.raises(FormatError, match="line 1") as caught:
        list_audio_jsonl(tmp_path / "x.jsonl")
    assert "\n" not in str(caught.value)


def test_a_listed_path_holding_a_nul_byte_is_a_skipped_file(tmp_path):
    """Found by tests/robustness/test_audio_listings.py: a path with a NUL byte raised a raw
    ValueError from the probe (the file is skipped and listed like one that cannot be read)."""
    problem = probe_audio(AudioSource(tmp_path / "a.wav\x00x", "a"))
    assert isinstance(problem, str) and "cannot read the file" in problem


def test_a_jsonl_listing_with_a_byte_order_mark_is_read_like_a_csv_one(tmp_path):
    """A recordings JSONL or WeNet data.list saved with a UTF-8 byte order mark (as Windows
    editors write it) was refused as "not valid JSON" on line 1; CSV listings accept one."""
    write_recordings(tmp_path, names=("a.wav", "b.flac"))
    records = [{"key": "u1", "wav": "a.wav", "txt": "one", "start": 0.1, "end": 0.6},
               {"path": "b.flac", "txt": "bee"}]
    text = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "data.list").write_text(text, encoding="utf-8-sig")
    sources = list_audio_jsonl(tmp_path / "data.list")
    assert [(s.path, s.key, s.txt) for s in sources] == [
        (tmp_path / "a.wav", "u1", "one"), (tmp_path / "b.flac", "b.flac", "bee")]
    assert sources[0].segments == [{"key": "u1", "start": 0.1, "end": 0.6, "txt": "one"}]
    (tmp_path / "latin1.jsonl").write_bytes('{"path": "é.wav"}\n'.encode("latin-1"))
    with pytest.raises(FormatError, match=r"latin1.jsonl: not UTF-8 text .*save the listing"):
        list_audio_jsonl(tmp_path / "latin1.jsonl")
