"""Small generated recordings for the audio tests: WAV and FLAC files with known samples, a
JSONL metainfo file listing them with segments, and a converted dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# name -> (format, sample rate, channels, seconds)
RECORDINGS = {
    "a.wav": ("WAV", 16000, 1, 1.5),
    "b.flac": ("FLAC", 16000, 1, 2.0),
    "c.flac": ("FLAC", 22050, 2, 1.2),
    "d.wav": ("WAV", 8000, 2, 0.7),
}


def pcm_of(name: str) -> np.ndarray:
    """The int16 [frames, channels] samples written as recording `name`."""
    _, rate, channels, seconds = RECORDINGS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    return (rng.standard_normal((round(rate * seconds), channels)) * 4000).astype(np.int16)


def segments_of(name: str) -> list[dict]:
    """Overlapping segments inside the recording (the last one ends exactly at its end)."""
    seconds = RECORDINGS[name][3]
    return [{"start": 0.1, "end": 0.6, "txt": f"{name} one"},
            {"start": 0.35, "end": 0.5, "txt": f"{name} two"},
            {"start": 0.2, "end": seconds, "txt": f"{name} three"}]


def write_recordings(folder: Path, names=tuple(RECORDINGS), segments=segments_of) -> Path:
    """The recordings as files in `folder` plus `folder/rec.jsonl`; returns the JSONL path."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in names:
        fmt, rate, _, _ = RECORDINGS[name]
        sf.write(folder / name, pcm_of(name), rate, format=fmt, subtype="PCM_16")
        lines.append(json.dumps({"key": name, "path": name, "txt": f"all of {name}",
                                 "sample_rate": rate, "info": {"segments": segments(name),
                                                               "speaker": name[0]}}))
    jsonl = folder / "rec.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    return jsonl


def convert_recordings(folder: Path, **kwargs) -> Path:
    """write_recordings + convert_audio into folder/ds; returns the dataset folder."""
    from chute.convert import AudioConvertOptions, convert_audio

    jsonl = write_recordings(folder, **kwargs)
    convert_audio(jsonl, folder / "ds", AudioConvertOptions(workers=1, progress=False))
    return folder / "ds"
