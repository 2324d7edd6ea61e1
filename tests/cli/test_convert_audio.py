"""`chute convert audio`: chute/_cli/convert_audio.py."""

import pytest

from chute.cli import main
from chute.readers import open_dataset
from tests._audio import write_recordings

pytest.importorskip("soundfile")


def test_convert_audio_jsonl_with_workers_and_csv(tmp_path, capsys):
    jsonl = write_recordings(tmp_path / "src", segments=lambda name: [
        {"start": 0.0, "end": 0.5}, {"start": 0.4, "end": 0.3}])
    assert main(["convert", "audio", str(jsonl), str(tmp_path / "ds"), "--workers", "2",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 4 recordings (4 segments)" in printed
    assert "skipped 0 files and 4 segments" in printed
    assert "#segment1\tend 0.3 is not after start 0.4" in (tmp_path / "ds/skipped.tsv").read_text()
    (tmp_path / "src" / "list.csv").write_text("path,text\na.wav,hi\nmissing.wav,x\n")
    assert main(["convert", "audio", str(tmp_path / "src" / "list.csv"), str(tmp_path / "c"),
                 "--no-progress", "--workers", "1"]) == 0
    assert "skipped 1 files" in capsys.readouterr().out
    assert open_dataset(tmp_path / "c")[0]["meta"]["segments"][0]["txt"] == "hi"
    assert main(["convert", "audio", str(tmp_path / "src" / "list.csv"), str(tmp_path / "s"),
                 "--no-progress", "--strict"]) == 1
    assert "missing.wav" in capsys.readouterr().err


def test_convert_audio_from_a_kaldi_data_folder(tmp_path, capsys, monkeypatch):
    # issue 27 item 15: wav.scp paths are relative to the recipe folder Kaldi runs from
    write_recordings(tmp_path, names=("a.wav", "b.flac"))
    data = tmp_path / "data" / "dev"
    data.mkdir(parents=True)
    (data / "wav.scp").write_text("r1 a.wav\nr2 b.flac\n")
    (data / "segments").write_text("u1 r1 0.0 0.5\nu2 r2 0.5 1.0\nu3 r2 1.0 9.0\n")
    (data / "text").write_text("u1 one\nu2 two\nu3 past the end\n")
    monkeypatch.chdir(tmp_path)
    assert main(["convert", "audio", "data/dev", str(tmp_path / "ds"), "--no-progress",
                 "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 recordings (2 segments)" in printed and "0 files and 1 segments" in printed
    ds = open_dataset(tmp_path / "ds")
    assert [s["txt"] for i in range(2) for s in ds[i]["meta"]["segments"]] == ["one", "two"]
    assert main(["convert", "audio", "data/dev/wav.scp", str(tmp_path / "s"), "--strict",
                 "--no-progress"]) == 1
    assert "b.flac#segment1 (u3): ends at 9.0 s" in capsys.readouterr().err
