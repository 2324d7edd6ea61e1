"""Small generated datasets of the modalities besides images, for `chute demo`: a zarr group of
latents, FLAC/WAV recordings converted to an audio dataset, short videos converted to a video
dataset. Each writer imports its optional package on call; `missing_extra` says beforehand
which one is absent."""

from __future__ import annotations

import csv
import importlib
import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np

__all__ = ["EXTRAS", "missing_extra", "write_latents", "write_audio", "write_video"]

# modality -> (module to import, the extra of chute that installs it)
EXTRAS = {"latents": ("zarr", "zarr"), "audio": ("soundfile", "audio"), "video": ("av", "video")}


def missing_extra(modality: str) -> str | None:
    """None when `modality`'s optional package imports, else a one-line reason to skip it."""
    if modality not in EXTRAS:
        return None
    module, extra = EXTRAS[modality]
    try:
        importlib.import_module(module)
    except ImportError:
        return f"`{module}` is not installed (pip install chute[{extra}])"
    return None


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def write_latents(path: Path, count: int = 1024, shape=(4, 32, 32), classes: int = 10,
                  seed: int = 0, chunk: int = 1) -> Path:
    """A zarr (v3) group at `path`: `latent` float16 [count, *shape] chunked `chunk` rows and
    zstd-compressed, `label` int64 [count]. Every chunk is written, also those equal to the
    fill value (a label chunk of 0s), which zarr skips by default and chute then reads as a
    missing chunk (docs/latents.md). Returns `path`."""
    import zarr

    from chute.readers import compressors

    rng = np.random.default_rng(seed)
    label = rng.integers(0, classes, count)
    # a class-dependent mean so the values are not pure noise
    latent = (rng.standard_normal((count, *shape)) * 0.5 + label[:, None, None, None] / classes)
    if path.exists():
        shutil.rmtree(path)
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arrays: dict[str, np.ndarray] = {"latent": latent.astype(np.float16), "label": label}
    for name, value in arrays.items():
        array = group.create_array(name, shape=value.shape, dtype=value.dtype,
                                   chunks=(min(chunk, count), *value.shape[1:]),
                                   compressors=compressors("zstd", 3),
                                   config={"write_empty_chunks": True})  # type: ignore[arg-type]
        array[...] = value
    return path


def _tone(rate: int, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """int16 mono: a gliding sine with its harmonic over soft noise."""
    t = np.arange(round(rate * seconds)) / rate
    f0 = rng.uniform(150, 400)
    phase = 2 * np.pi * (f0 * t + rng.uniform(20, 80) * t * t)
    wave = 0.5 * np.sin(phase) + 0.2 * np.sin(2 * phase) + 0.05 * rng.standard_normal(len(t))
    return (wave * 12000).astype(np.int16)


def write_audio(folder: Path, count: int = 16, rate: int = 16000, seconds: float = 6.0,
                segment: float = 1.5, seed: int = 0) -> Path:
    """`count` recordings (FLAC and WAV, `rate` Hz mono, `seconds` long) in `folder/files`,
    each with back-to-back segments of `segment` seconds, converted with chute's audio converter
    to `folder/audio.chute`. Returns the dataset path."""
    import soundfile as sf

    from chute.convert import AudioConvertOptions, convert_audio

    files = _fresh(folder / "files")
    rng = np.random.default_rng(seed)
    lines = []
    starts = np.arange(0.0, seconds - segment + 1e-9, segment)
    for i in range(count):
        name = f"rec{i:03d}." + ("flac" if i % 2 == 0 else "wav")
        sf.write(files / name, _tone(rate, seconds, rng), rate, subtype="PCM_16")
        segments = [{"start": round(s, 3), "end": round(s + segment, 3), "txt": f"part {k}"}
                    for k, s in enumerate(starts)]
        lines.append(json.dumps({"key": name, "path": name, "txt": f"recording {i}",
                                 "sample_rate": rate, "info": {"segments": segments}}))
    (files / "recordings.jsonl").write_text("\n".join(lines) + "\n")
    dst = folder / "audio.chute"
    convert_audio(files / "recordings.jsonl", dst,
                  AudioConvertOptions(overwrite=True, progress=False, workers=1))
    return dst


def _encode_video(path: Path, frames: int, size: int, seed: int, codec: str) -> None:
    """`frames` frames of drifting colour waves, `size`x`size`, 25 fps, in an MP4."""
    import av

    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    shift = np.random.default_rng(seed).uniform(0, 6, 3)
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(codec, rate=25)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = Fraction(1, 25)
        stream.gop_size = 10
        if codec == "libx264":
            stream.options = {"preset": "ultrafast", "crf": "20"}
        for k in range(frames):
            image = np.stack([127 + 100 * np.sin(x / (6 + c) + y / (9 - c) + k / 5 + shift[c])
                              for c in range(3)], axis=-1).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _video_codec() -> str:
    """H.264 when PyAV's FFmpeg has an encoder for it, else MPEG-4 part 2."""
    import av

    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # noqa: BLE001 - any failure means: not this encoder
        return "mpeg4"
    return "libx264"


def write_video(folder: Path, count: int = 12, frames: int = 30, size: int = 64,
                seed: int = 0) -> tuple[Path, str]:
    """`count` MP4 clips of `frames` frames at `size`x`size` in `folder/files`, listed in a CSV
    and converted with chute's video converter to `folder/video.chute`. Returns the dataset path
    and the codec used."""
    from chute.convert import convert_video_csv

    files = _fresh(folder / "files")
    codec = _video_codec()
    with open(files / "videos.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "text"])
        for i in range(count):
            _encode_video(files / f"clip{i:03d}.mp4", frames, size, seed + i, codec)
            writer.writerow([f"clip{i:03d}.mp4", f"clip {i}"])
    dst = folder / "video.chute"
    convert_video_csv(files / "videos.csv", dst, overwrite=True, progress=False, workers=2)
    return dst, codec
