"""Converting on Ray (issue 24): `chute convert csv` throughput in one process (1 worker and a
process pool), and on a local Ray instance with 1 and 2 CPUs, side by side in one run, plus
what one Ray task costs, so users can size a cluster.

    .venv/bin/python benchmarks/bench_convert_ray.py [--src DIR] [--repeat 4]
        [--max-side 256] [--shard-size 64MiB] [--json FILE]

Input: a CSV listing the --src JPEGs --repeat times (N rows). Two workloads:
  store   JPEG bytes stored as they are (read, header parsed, checksummed, written);
  resize  --max-side: every image decoded, downscaled and re-encoded (CPU-bound).
Configurations (each convert writes a new dataset in a temporary folder):
  local 1     `--workers 1`: this process only;
  local 2     `--workers 2`: a pool of 2 processes;
  ray 1 / 2   `--engine ray` on a local Ray instance started with 1 / 2 CPUs (in a child
              process, so each count gets a fresh instance), default task size (four tasks
              per CPU); the instance's start is timed apart and not in the rate.
Per-task cost: the store workload on Ray with 2 CPUs at --task-size 8 (N/8 tasks) against the
default task size; (t_small - t_default) / (tasks_small - tasks_default) is what one more task
costs (scheduling, the job fetched from Ray's object store, a part's last partial shard, the
commit's renames).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _datasets import jpeg_files

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = ROOT.parent / "shared/data/imagenet-sample/images"


def write_csv(files: list[Path], repeat: int, path: Path) -> int:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label"])
        for _ in range(repeat):
            for k, file in enumerate(files):
                out.writerow([str(file.resolve()), k % 100])
    return len(files) * repeat


def convert(listing: Path, dst: Path, *, workers: int | None, max_side: int | None,
            shard_size: str, engine=None) -> float:
    from chute.convert import ConvertOptions, convert_csv

    options = ConvertOptions(shard_size=shard_size, workers=workers, max_side=max_side,
                             progress=False, overwrite=True)
    start = time.perf_counter()
    convert_csv(listing, dst, options, engine=engine)
    return time.perf_counter() - start


def child(args: argparse.Namespace) -> None:
    """One Ray configuration in a fresh process: prints {"startup_s", "seconds", "tasks"}."""
    import ray

    from chute.ray import RayEngine

    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    startup = time.perf_counter() - start
    engine = RayEngine(task_size=args.task_size)
    rows = sum(1 for _ in open(args.listing)) - 1
    size = args.task_size or max(1, math.ceil(rows / (4 * args.cpus)))
    seconds = convert(Path(args.listing), Path(args.dst), workers=None,
                      max_side=args.max_side or None, shard_size=args.shard_size, engine=engine)
    print(json.dumps({"startup_s": startup, "seconds": seconds,
                      "tasks": math.ceil(rows / size)}))


def run_ray(listing: Path, dst: Path, cpus: int, max_side: int | None, shard_size: str,
            task_size: int | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", "--cpus", str(cpus), "--listing", str(listing),
           "--dst", str(dst), "--max-side", str(max_side or 0), "--shard-size", shard_size]
    if task_size:
        cmd += ["--task-size", str(task_size)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--max-side", type=int, default=256)
    parser.add_argument("--shard-size", default="64MiB")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpus", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--listing", help=argparse.SUPPRESS)
    parser.add_argument("--dst", help=argparse.SUPPRESS)
    parser.add_argument("--task-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    files = jpeg_files(args.src)
    tmp = Path(tempfile.mkdtemp(prefix="bench-convert-ray-"))
    try:
        listing = tmp / "list.csv"
        n = write_csv(files, args.repeat, listing)
        print(f"{n} images ({len(files)} files x {args.repeat}) from {args.src}")
        results: list[dict] = []
        for workload, max_side in (("store", None), ("resize", args.max_side)):
            # untimed: the files in the page cache, the pool's imports warm
            convert(listing, tmp / "warm", workers=1, max_side=max_side,
                    shard_size=args.shard_size)
            for workers in (1, 2):
                seconds = convert(listing, tmp / "out", workers=workers, max_side=max_side,
                                  shard_size=args.shard_size)
                results.append({"workload": workload, "engine": "local", "cpus": workers,
                                "tasks": None, "seconds": seconds, "rate": n / seconds})
            for cpus in (1, 2):
                got = run_ray(listing, tmp / "out", cpus, max_side, args.shard_size)
                results.append({"workload": workload, "engine": "ray", "cpus": cpus,
                                "tasks": got["tasks"], "seconds": got["seconds"],
                                "rate": n / got["seconds"], "startup_s": got["startup_s"]})
        small = run_ray(listing, tmp / "out", 2, None, args.shard_size, task_size=8)
        default = next(r for r in results if r["workload"] == "store" and
                       r["engine"] == "ray" and r["cpus"] == 2)
        per_task = (small["seconds"] - default["seconds"]) / (small["tasks"] - default["tasks"])
        print("\n| workload | engine | CPUs | tasks | seconds | images/s | vs local 1 |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in results:
            base = next(b for b in results if b["workload"] == r["workload"] and
                        b["engine"] == "local" and b["cpus"] == 1)
            print(f"| {r['workload']} | {r['engine']} | {r['cpus']} | {r['tasks'] or '-'} | "
                  f"{r['seconds']:.2f} | {r['rate']:,.0f} | {r['rate'] / base['rate']:.2f}x |")
        startups = [r["startup_s"] for r in results if "startup_s" in r]
        print(f"\nRay instance start (not in the rates): {min(startups):.1f}-"
              f"{max(startups):.1f} s")
        print(f"per-task cost (store, 2 CPUs): {small['tasks']} tasks {small['seconds']:.2f} s "
              f"vs {default['tasks']} tasks {default['seconds']:.2f} s -> "
              f"{per_task * 1000:.0f} ms per task")
        if args.json:
            args.json.write_text(json.dumps({"images": n, "results": results,
                                             "per_task_s": per_task,
                                             "small_tasks": small}, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
