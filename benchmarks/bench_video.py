"""Video clips side by side, one run, same cores: the usual loader vs chute vs a decode bound.

(a) usual: a map-style torch Dataset that decodes the whole file with PyAV, keeps the clip's
    frames, resizes + centre-crops with torch (antialiased bilinear) and scales to [-1, 1], in a
    DataLoader with one worker per core;
(b) chute: Pipeline over `chute convert video` of the same files (span-only decoding, threads
    across samples), same clip frames, same output;
(c) bound: FFmpeg decoding exactly the frames from the nearest keyframe before each clip to its
    last frame (no colour conversion, no resize), one process per core.

    .venv/bin/python benchmarks/bench_video.py [--videos DIR] [--frames 16] [--stride 4]
        [--size 256] [--clips 64] [--repeats 1] [--loaders abc]

With `--repeats N` the three loaders run round-robin N times ((a) (b) (c), (a) (b) (c), ...)
and the table gives each one's median rate, so one noisy pass on a shared machine does not
decide a ratio; every pass's rates and the load average are printed too. `--loaders b` runs
only chute (to compare checkouts of chute turn by turn on a shared machine).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import av
import numpy as np
import torch
import torch.nn.functional as F

from chute.convert._convert_video import convert_video_csv
from chute.pipelines import Pipeline, VideoOptions
from chute.pipelines.producers.video._clips import ClipParams, clip_indices
from chute.readers import open_dataset

DEFAULT_VIDEOS = Path(__file__).resolve().parents[2] / "shared/data/videos"
EXTENSIONS = {".mp4", ".mkv", ".webm", ".avi", ".mov"}


def torch_resize(frames: np.ndarray, size: int) -> torch.Tensor:
    """The usual spatial transform: shorter side to `size` (antialiased bilinear), centre crop,
    scale to [-1, 1]."""
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    h, w = x.shape[-2:]
    scale = size / min(h, w)
    x = F.interpolate(x, size=(max(size, round(h * scale)), max(size, round(w * scale))),
                      mode="bilinear", antialias=True, align_corners=False)
    top, left = (x.shape[-2] - size) // 2, (x.shape[-1] - size) // 2
    return x[..., top:top + size, left:left + size] / 127.5 - 1.0


class WholeFileClips(torch.utils.data.Dataset):
    """The usual loader: decode every frame of the file, then pick the clip."""

    def __init__(self, paths, starts, frames, stride, size):
        self.paths, self.starts, self.frames, self.stride, self.size = (
            paths, starts, frames, stride, size)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, k):
        path = self.paths[k % len(self.paths)]
        with av.open(str(path)) as c:
            decoded = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        picked = clip_indices(int(self.starts[k]), self.frames, self.stride, len(decoded))
        return torch_resize(np.stack([decoded[i] for i in picked]), self.size)


def _bound_one(job):
    data, pts, first, last = job
    with av.open(io.BytesIO(data)) as c:
        stream = c.streams.video[0]
        c.seek(int(pts[first]), stream=stream, backward=True, any_frame=False)
        n = 0
        for packet in c.demux(stream):
            for frame in packet.decode():
                n += 1
                if frame.pts is not None and frame.pts >= pts[last]:
                    return n
    return n


def run_usual(paths, starts, n, args, cores) -> float:
    """(a): clips/s of the usual loader."""
    t = time.perf_counter()
    loader = torch.utils.data.DataLoader(
        WholeFileClips([paths[i % len(paths)] for i in range(n)], starts, args.frames,
                       args.stride, args.size),
        batch_size=args.batch_size, num_workers=cores)
    clips = sum(len(b) for b in loader)
    return clips / (time.perf_counter() - t)


def run_chute(ds, args, opts) -> float:
    """(b): clips/s of chute's cpu video producer (construction not timed)."""
    with Pipeline(ds, args.batch_size, augment="train", device="cpu", drop_last=False,
                  fields={"video": VideoOptions(**opts)}) as pipe:
        t = time.perf_counter()
        clips = sum(len(b["index"]) for b in pipe)
        return clips / (time.perf_counter() - t)


def run_bound(jobs, cores) -> float:
    """(c): clips/s of FFmpeg decoding each clip's span, one process per core."""
    t = time.perf_counter()
    with ProcessPoolExecutor(cores) as pool:
        list(pool.map(_bound_one, jobs))
    return len(jobs) / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=Path, default=DEFAULT_VIDEOS)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--stride", type=int, default=4)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--clips", type=int, default=64, help="clips per configuration")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1,
                        help="round-robin passes over (a) (b) (c); the table shows medians")
    parser.add_argument("--loaders", default="abc", help="which of (a) (b) (c) to run")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    paths = sorted(p for p in args.videos.iterdir() if p.suffix.lower() in EXTENSIONS)
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "videos.csv"
        with open(table, "w", newline="") as f:
            csv.writer(f).writerows([["path", "text"], *[[str(p), p.stem] for p in paths]])
        # the dataset repeats the files so every configuration reads `clips` clips
        repeats = -(-args.clips // len(paths))
        with open(table, "a", newline="") as f:
            csv.writer(f).writerows([[str(p), p.stem] for _ in range(repeats - 1) for p in paths])
        convert_video_csv(table, Path(tmp) / "ds", progress=False)
        ds = open_dataset(Path(tmp) / "ds")
        n = len(ds)
        starts = ClipParams(args.frames, args.stride, "train", np.asarray(
            ds.column("num_frames")))(0, 0, np.arange(n))["clip_start"]
        opts = {"num_frames": args.frames, "frame_interval": args.stride,
                "size": (args.size, args.size), "dtype": "float32", "threads": cores}
        jobs = []
        for i in range(n):
            sample = ds[i]
            frames = int(sample["num_frames"])
            picked = clip_indices(int(starts[i]), args.frames, args.stride, frames)
            jobs.append((sample["video"].tobytes(), np.asarray(sample["pts"]),
                         int(picked[0]), int(picked[-1])))
        loaders = {
            "(a) PyAV whole file + DataLoader": lambda: run_usual(paths, starts, n, args, cores),
            "(b) chute cpu": lambda: run_chute(ds, args, opts),
            "(c) decode-only bound": lambda: run_bound(jobs, cores),
        }
        loaders = {name: run for name, run in loaders.items() if name[1] in args.loaders}
        passes: dict[str, list[float]] = {name: [] for name in loaders}
        for r in range(args.repeats):
            for name, run in loaders.items():
                passes[name].append(run())
            last = {name[1]: rates[-1] for name, rates in passes.items()}
            ratios = "".join(f"; (b)/({x}) {last['b'] / last[x]:.2f}x" for x in "ac"
                             if "b" in last and x in last)
            print(f"pass {r + 1}: " + ", ".join(f"{name[:3]} {rates[-1]:.2f} clips/s"
                                                for name, rates in passes.items())
                  + f"{ratios} (load average {os.getloadavg()[0]:.1f})", flush=True)
        results = {name: statistics.median(rates) for name, rates in passes.items()}

    print(f"{n} clips of {args.frames} frames, stride {args.stride}, {args.size}px, "
          f"{cores} cores, {len(paths)} source videos, median of {args.repeats} pass(es)")
    print("| loader | clips/s | frames/s | vs (a) | vs (c) |")
    print("|---|---|---|---|---|")
    a = results.get("(a) PyAV whole file + DataLoader", float("nan"))
    c = results.get("(c) decode-only bound", float("nan"))
    for name, rate in results.items():
        print(f"| {name} | {rate:.1f} | {rate * args.frames:.0f} | {rate / a:.2f}x | "
              f"{rate / c:.2f}x |")


if __name__ == "__main__":
    main()
