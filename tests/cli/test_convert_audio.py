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
