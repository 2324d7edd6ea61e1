"""`chute demo`: every modality built and streamed with one throughput line each; a modality
whose optional package is missing is skipped with the extra to install, not a traceback."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chute._cli.demo import MODALITIES, modalities
from chute.cli import main

ROOT = Path(__file__).resolve().parents[2]

# "      latents: 12,345 samples/s, ..." in the step, "  latents  12,345 samples/s" in the summary
STEP_LINE = r"^ {6}%s: [\d,]+ %s/s"
SUMMARY_LINE = r"^  %s +[\d,]+ %s/s"
UNITS = {"image": "img", "latents": "samples", "audio": "segments", "video": "clips"}


def test_modalities_argument():
    assert modalities("video, latents") == ("latents", "video")
    assert modalities("all") == MODALITIES
    for text in ("", "image,sound", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated list"):
            modalities(text)


@pytest.mark.slow
def test_a_missing_extra_is_one_skip_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "soundfile", None)  # `import soundfile` raises ImportError
    monkeypatch.setitem(sys.modules, "av", None)
    assert main(["demo", "--workdir", str(tmp_path), "--modalities", "audio,video,latents",
                 "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "audio: skipped: `soundfile` is not installed (pip install chute[audio])" in out
    assert "video: skipped: `av` is not installed (pip install chute[video])" in out
    assert re.search(STEP_LINE % ("latents", "samples"), out, re.M)
    assert re.search(SUMMARY_LINE % ("latents", "samples"), out, re.M)
    assert "Traceback" not in out and "[1/1]" in out and "epoch" not in out


@pytest.mark.slow
def test_json_is_one_object_on_stdout_with_the_measurements(tmp_path, monkeypatch, capsys):
    """`--json`: stdout holds only the JSON object (rate and unit per modality, the paths it
    wrote, a skipped modality's reason); the human lines go to stderr."""
    monkeypatch.setitem(sys.modules, "av", None)  # video skipped: keeps the test fast
    assert main(["demo", "--workdir", str(tmp_path), "--modalities", "latents,video",
                 "--seconds", "0.2", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert set(result) == {"device", "workdir", "latents", "video"}
    latents = result["latents"]
    assert latents["unit"] == "samples/s" and latents["rate"] > 0 and latents["batches"] > 0
    assert Path(latents["path"]) == tmp_path / "latents.zarr" and Path(latents["path"]).is_dir()
    assert result["video"] == {"skipped": "`av` is not installed (pip install chute[video])"}
    assert re.search(STEP_LINE % ("latents", "samples"), captured.err, re.M)
    assert "throughput on" in captured.err


@pytest.mark.slow
def test_demo_json_reports_every_modality_and_the_autotune_choice(tmp_path):
    """The whole demo with --json in a process: stdout parses as one object."""
    proc = subprocess.run(
        [sys.executable, "-m", "chute.cli", "demo", "--workdir", str(tmp_path),
         "--images", "32", "--batch-size", "16", "--image-size", "64", "--epochs", "1",
         "--budget", "2", "--seconds", "0.3", "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "CHUTE_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for modality, unit in UNITS.items():
        assert result[modality]["unit"] == f"{unit}/s" and result[modality]["rate"] > 0, result
        assert Path(result[modality]["path"]).exists()
    image = result["image"]
    assert image["autotune"]["choice"] and image["backend"] and len(image["epochs"]) == 1
    assert image["samples"] == 32 and "[1/5]" in proc.stderr


@pytest.mark.slow
def test_demo_streams_every_modality(tmp_path):
    """The whole demo as `./dev.sh demo` runs it (small image set, short budget)."""
    proc = subprocess.run(
        [sys.executable, "-m", "chute.cli", "demo", "--workdir", str(tmp_path),
         "--images", "64", "--batch-size", "16", "--image-size", "64", "--epochs", "1",
         "--budget", "2", "--seconds", "0.5"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "CHUTE_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[1/5]" in out and "[5/5]" in out and "epoch 0: 64 images" in out
    for modality in ("latents", "audio", "video"):
        assert len(re.findall(STEP_LINE % (modality, UNITS[modality]), out, re.M)) == 1, out
    for modality, unit in UNITS.items():
        assert len(re.findall(SUMMARY_LINE % (modality, unit), out, re.M)) == 1, out
    assert (tmp_path / "latents.zarr" / "zarr.json").is_file()
    assert (tmp_path / "audio" / "audio.chute").is_dir()
    assert (tmp_path / "video" / "video.chute").is_dir()
