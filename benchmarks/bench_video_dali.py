"""The video backends side by side, one run, same cores: `cpu` (FFmpeg through PyAV) vs `dali`
(DALI's fn.decoders.video; CPU-only mode with --device cpu, NVDEC with --device cuda).

DALI's CPU mode decodes only VP8, VP9 and MJPEG, so with --codec vp9 or mjpeg the source videos
are first re-encoded (into a temporary folder, keyframe every 30 frames) and both backends read
the same re-encoded dataset; --codec copy keeps the files as they are (H.264 needs --device
cuda). Each backend reads the same clips (same plan) twice in the order cpu, dali, dali, cpu;
the table gives the better of its two runs and how far it is from the other backend.

    .venv/bin/python benchmarks/bench_video_dali.py [--videos DIR] [--codec vp9|mjpeg|copy]
        [--device cpu|cuda] [--frames 16] [--stride 4] [--size 256] [--clips 64]
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av

from chute.convert._convert_video import convert_video_csv
from chute.pipelines import Pipeline, VideoOptions

DEFAULT_VIDEOS = Path(__file__).resolve().parents[2] / "shared/data/videos"
EXTENSIONS = {".mp4", ".mkv", ".webm", ".avi", ".mov"}
# --codec -> (encoder, container suffix, pixel format, encoder options)
CODECS = {
    "vp9": ("libvpx-vp9", ".webm", "yuv420p",
            {"deadline": "realtime", "cpu-used": "8", "g": "30", "crf": "32", "b": "0"}),
    "mjpeg": ("mjpeg", ".avi", "yuvj420p", {}),
}


def reencode(src: Path, dst: Path, codec: str) -> None:
    """`src` re-encoded with `codec` at its own size, frame rate and timestamps."""
    encoder, _, pix_fmt, options = CODECS[codec]
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        stream_in = inp.streams.video[0]
        rate = Fraction(stream_in.average_rate or 25).limit_denominator(1001)
        stream = out.add_stream(encoder, rate=rate)
        stream.width, stream.height = stream_in.width, stream_in.height
        stream.pix_fmt = pix_fmt
        stream.time_base = stream.codec_context.time_base = stream_in.time_base  # same stamps
        stream.options = dict(options)
        for frame in inp.decode(stream_in):
            converted = frame.reformat(format=pix_fmt)
            converted.pts, converted.time_base = frame.pts, frame.time_base
            out.mux(stream.encode(converted))
        out.mux(stream.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=Path, default=DEFAULT_VIDEOS)
    parser.add_argument("--codec", choices=[*CODECS, "copy"], default="vp9")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--stride", type=int, default=4)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--clips", type=int, default=64, help="clips per run")
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    paths = sorted(p for p in args.videos.iterdir() if p.suffix.lower() in EXTENSIONS)
    with tempfile.TemporaryDirectory() as tmp:
        if args.codec != "copy":
            t = time.perf_counter()
            sources = []
            for p in paths:
                sources.append(Path(tmp) / (p.stem + CODECS[args.codec][1]))
                reencode(p, sources[-1], args.codec)
            print(f"re-encoded {len(paths)} videos to {args.codec} in "
                  f"{time.perf_counter() - t:.0f} s")
            paths = sources
        table = Path(tmp) / "videos.csv"
        repeats = -(-args.clips // len(paths))  # every run reads `clips` clips
        with open(table, "w", newline="") as f:
            csv.writer(f).writerows([["path", "text"],
                                     *[[str(p), p.stem] for _ in range(repeats) for p in paths]])
        convert_video_csv(table, Path(tmp) / "ds", progress=False)
        opts = {"num_frames": args.frames, "frame_interval": args.stride,
                "size": (args.size, args.size), "dtype": "float32", "threads": cores}
        runs: dict[str, list[float]] = {"cpu": [], "dali": []}
        for backend in ("cpu", "dali", "dali", "cpu"):
            with Pipeline(Path(tmp) / "ds", args.batch_size, augment="train",
                          device=args.device, drop_last=False,
                          fields={"video": VideoOptions(**opts, backend=backend)}) as pipe:
                t = time.perf_counter()
                clips = sum(len(b["index"]) for b in pipe)
                runs[backend].append(clips / (time.perf_counter() - t))
    print(f"{clips} clips of {args.frames} frames, stride {args.stride}, {args.size}px, "
          f"float32, {args.codec}, device {args.device}, {cores} cores, {len(paths)} videos")
    print("| backend | clips/s | frames/s | vs cpu | runs (clips/s) |")
    print("|---|---:|---:|---:|---|")
    cpu = max(runs["cpu"])
    for backend, rates in runs.items():
        best = max(rates)
        print(f"| {backend} | {best:.1f} | {best * args.frames:.0f} | {best / cpu:.2f}x | "
              f"{', '.join(f'{r:.1f}' for r in rates)} |")


if __name__ == "__main__":
    main()
