"""Audio segments side by side, in one run:

(a) tar shards of pre-cut segment files (WAV, then FLAC), read sequentially and decoded with
    soundfile in a torch DataLoader with one worker per core (the WeNet/WebDataset layout);
(b) chute: each recording stored once, segments cut at read time, in random order; once on the
    recordings as they are (FLAC) and once on WAV copies of them, so each tar format has a chute
    row that stores the same format;
(c) the decode-only bound: the same segments decoded from in-memory bytes in one loop.

Segments are 1-4 s windows of each recording at fixed seeded times, overlapping.
Run: python benchmarks/bench_audio.py ../shared/data/audio [--epochs 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from chute.convert import AudioConvertOptions, convert_audio
from chute.pipelines import AudioOptions, Pipeline

BATCH = 16


def make_segments(files: list[Path], seed: int = 0) -> list[tuple[Path, float, float]]:
    """1-4 s windows starting every 1.5 s (so most overlap their neighbours)."""
    rng = np.random.default_rng(seed)
    segments = []
    for path in files:
        duration = sf.info(path).duration
        start = 0.0
        while start + 1.0 <= duration:
            end = min(start + float(rng.uniform(1.0, 4.0)), duration)
            segments.append((path, round(start, 3), round(end, 3)))
            start += 1.5
    return segments


def write_tars(segments, folder: Path, fmt: str, shards: int) -> list[Path]:
    """The segments cut into files of format `fmt`, spread over `shards` tar files."""
    folder.mkdir(parents=True)
    tars = [tarfile.open(folder / f"{k:03d}.tar", "w") for k in range(shards)]
    for i, (path, start, end) in enumerate(segments):
        rate = sf.info(path).samplerate
        data, _ = sf.read(path, start=round(start * rate), stop=round(end * rate),
                          dtype="int16")
        buffer = io.BytesIO()
        sf.write(buffer, data, rate, format=fmt, subtype="PCM_16")
        payload = buffer.getvalue()  # (FLAC seeks back to its header: tell() is not the size)
        info = tarfile.TarInfo(f"{i:06d}.{fmt.lower()}")
        info.size = len(payload)
        tars[i % shards].addfile(info, io.BytesIO(payload))
    for t in tars:
        t.close()
    return sorted(folder.glob("*.tar"))


class TarSegments(torch.utils.data.IterableDataset):
    """Every member of the tar shards in order; workers split the shards."""

    def __init__(self, tars: list[Path]):
        self.tars = tars

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        mine = self.tars if worker is None else self.tars[worker.id::worker.num_workers]
        for tar_path in mine:
            with tarfile.open(tar_path) as tar:
                for member in tar:
                    data, _ = sf.read(io.BytesIO(tar.extractfile(member).read()),
                                      dtype="float32")
                    yield torch.from_numpy(data)


def pad(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(x) for x in items])
    out = torch.zeros(len(items), int(lengths.max()))
    for k, x in enumerate(items):
        out[k, :len(x)] = x
    return out, lengths


def run_tars(tars, epochs: int, workers: int) -> tuple[int, int, float]:
    loader = torch.utils.data.DataLoader(TarSegments(tars), batch_size=BATCH,
                                         num_workers=workers, collate_fn=pad,
                                         persistent_workers=workers > 0)
    list(loader)  # warm-up epoch (workers start, page cache)
    count, frames, t0 = 0, 0, time.perf_counter()
    for _ in range(epochs):
        for _audio, lengths in loader:
            count += len(lengths)
            frames += int(lengths.sum())
    return count, frames, time.perf_counter() - t0


def run_chute(dataset: Path, epochs: int, threads: int) -> tuple[int, int, float]:
    pipe = Pipeline(dataset, BATCH, augment="eval",
                    fields={"audio": AudioOptions(unit="segment", threads=threads)})
    list(pipe)  # warm-up epoch
    count, frames, t0 = 0, 0, time.perf_counter()
    for epoch in range(epochs):
        pipe.set_epoch(epoch + 1)
        for batch in pipe:
            count += len(batch["index"])
            frames += int(batch["audio_lengths"].sum())
    pipe.close()
    return count, frames, time.perf_counter() - t0


def run_decode_only(segments, epochs: int) -> tuple[int, int, float]:
    payloads = {p: p.read_bytes() for p in {p for p, _, _ in segments}}
    rates = {p: sf.info(p).samplerate for p in payloads}
    count, frames, t0 = 0, 0, time.perf_counter()
    for _ in range(epochs):
        for path, start, end in segments:
            with sf.SoundFile(io.BytesIO(payloads[path])) as f:
                f.seek(round(start * rates[path]))
                data = f.read(round(end * rates[path]) - round(start * rates[path]),
                              dtype="float32")
            count += 1
            frames += len(data)
    return count, frames, time.perf_counter() - t0


def wav_copies(files: list[Path], folder: Path) -> dict[Path, Path]:
    """16-bit WAV copies of the recordings (what a WAV corpus would hold)."""
    folder.mkdir(parents=True)
    copies = {}
    for path in files:
        data, rate = sf.read(path, dtype="int16")
        copies[path] = folder / (path.stem + ".wav")
        sf.write(copies[path], data, rate, subtype="PCM_16")
    return copies


def convert(segments, sources: dict[Path, Path], jsonl: Path, dst: Path) -> Path:
    """chute dataset of the recordings (`sources` maps each to the file stored) and their
    segments."""
    lines: dict[Path, list] = {}
    for path, start, end in segments:
        lines.setdefault(path, []).append({"start": start, "end": end})
    jsonl.write_text("".join(json.dumps({"key": p.name, "path": str(sources[p].resolve()),
                                         "info": {"segments": s}}) + "\n"
                             for p, s in lines.items()))
    convert_audio(jsonl, dst, AudioConvertOptions(progress=False, workers=1))
    return dst


def size_of(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="folder of FLAC/WAV recordings")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="DataLoader workers for (a) and decode threads for (b)")
    args = parser.parse_args()
    files = sorted(p for p in args.data.iterdir() if p.suffix.lower() in (".flac", ".wav"))
    if not files:
        raise SystemExit(f"{args.data}: no .flac or .wav files")
    segments = make_segments(files)
    rate = sf.info(files[0]).samplerate
    work = Path(tempfile.mkdtemp(prefix="bench_audio_"))
    try:
        flac_ds = convert(segments, {p: p for p in files}, work / "flac.jsonl", work / "ds")
        wav_ds = convert(segments, wav_copies(files, work / "wavsrc"), work / "wav.jsonl",
                         work / "ds-wav")
        shards = max(args.workers, 1) * 2
        wav = write_tars(segments, work / "wav", "WAV", shards)
        flac = write_tars(segments, work / "flac", "FLAC", shards)
        rows = [
            ("(a) tar of cut WAV, DataLoader", size_of(wav), run_tars(wav, args.epochs,
                                                                       args.workers)),
            ("(a) tar of cut FLAC, DataLoader", size_of(flac), run_tars(flac, args.epochs,
                                                                         args.workers)),
            ("(b) chute segments, random order", size_of(flac_ds.rglob("audio.bin")),
             run_chute(flac_ds, args.epochs, args.workers)),
            ("(b) chute on WAV copies, random", size_of(wav_ds.rglob("audio.bin")),
             run_chute(wav_ds, args.epochs, args.workers)),
            ("(c) decode-only bound (1 thread)", size_of(files),
             run_decode_only(segments, args.epochs)),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(files)} recordings, {len(segments)} segments (1-4 s, overlapping), "
          f"{args.epochs} epochs, batch {BATCH}, {args.workers} workers/threads")
    print(f"| {'reader':34} | segments/s | audio s/s | bytes on disk |")
    print(f"|{'-' * 36}|-----------:|----------:|--------------:|")
    for name, size, (count, frames, seconds) in rows:
        print(f"| {name:34} | {count / seconds:10.0f} | {frames / rate / seconds:9.0f} | "
              f"{size:13,d} |")
    rate_of = [count / seconds for _, _, (count, _, seconds) in rows]
    print(f"chute / tar, same stored format: FLAC {rate_of[2] / rate_of[1]:.2f}x, "
          f"WAV {rate_of[3] / rate_of[0]:.2f}x")


if __name__ == "__main__":
    main()
