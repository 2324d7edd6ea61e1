"""Video inference under Poisson load, side by side in one run, same cores, same arrivals:

(a) naive: one process; for each request in arrival order, decode its clip (the same span-only
    decoder, one sample) and run the model at batch 1, then the next request;
(b) chute: `chute.infer` with the configuration `search` picks (replicas and batch size per
    stage, measured within --budget-s for the highest rate with p95 <= --slo-ms).

Requests are sample ids of a dataset converted from --videos, repeated to --requests; the model
is examples/video_classifier.py (random weights, seed 0) on 16x112x112 clips. Where CUDA is
available (--device auto) the model runs on the GPUs: (a) on cuda:0, (b) with its replicas
cycling over every GPU; decoding stays on the CPU. Each offered rate
runs twice per system in the order naive, chute, chute, naive (two arrival seeds), and the two
runs are pooled: throughput and p95 latency of both; a rate is sustained when p95 <= SLO with
nothing dropped or failed.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_infer.py [--videos DIR] [--requests 40]
        [--rates 2 3 4] [--slo-ms 1000] [--budget-s 240] [--search-requests 20]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from chute.convert._convert_video import convert_video_csv
from chute.infer import (
    InferServer,
    VideoClipLoader,
    load_config,
    run_bulk,
    run_poisson,
    summarize,
)
from chute.infer._search import format_trials, search
from chute.readers import open_dataset

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VIDEOS = ROOT.parent / "shared/data/videos"
EXTENSIONS = {".mp4", ".mkv", ".webm", ".avi", ".mov"}


def convert(videos: Path, dst: Path) -> Path:
    paths = sorted(p for p in videos.iterdir() if p.suffix.lower() in EXTENSIONS)
    table = dst.parent / "videos.csv"
    with open(table, "w", newline="") as f:
        csv.writer(f).writerows([["path", "text"], *[[str(p), p.stem] for p in paths]])
    convert_video_csv(table, dst, progress=False)
    return dst


def pick_devices(choice: str) -> tuple[str, list[str]]:
    """(the naive model's device, the model stage's devices) for --device."""
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return "cpu", ["cpu"]
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    return "cuda:0", [f"cuda:{k}" for k in range(torch.cuda.device_count())]


def naive(inputs: list, rate: float, seed: int, model, loader, device: str) -> dict:
    """Sequential serving of Poisson arrivals: a request waits for all earlier ones."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(inputs))
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    latencies = []
    start = time.monotonic()
    with torch.no_grad():
        for when, sample in zip(arrivals.tolist(), inputs, strict=True):
            if (left := start + when - time.monotonic()) > 0:
                time.sleep(left)
            (clip,) = loader([sample])
            model(clip[None].to(device)).cpu()  # the result in hand, as a server returns it
            latencies.append(time.monotonic() - (start + when))
    return {"latencies": latencies, "seconds": time.monotonic() - start, "dropped": 0,
            "failed": 0}


def chute(server, inputs: list, rate: float, seed: int) -> dict:
    run = run_poisson(server, inputs, rate, seed=seed)
    report = summarize(run, server)
    return {"latencies": [r.latency for r in run.requests if r.ok], "seconds": run.end - run.start,
            "dropped": report["dropped"], "failed": report["failed"]}


def pooled(runs: list[dict]) -> dict:
    """Both repetitions of one system at one rate as one sample of requests."""
    latencies = [x for r in runs for x in r["latencies"]]
    return {"throughput": len(latencies) / sum(r["seconds"] for r in runs),
            "p95": float(np.percentile(np.asarray(latencies) * 1000, 95)) if latencies else None,
            "dropped": sum(r["dropped"] for r in runs), "failed": sum(r["failed"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=Path, default=DEFAULT_VIDEOS)
    parser.add_argument("--config", type=Path, default=ROOT / "examples/infer_video.json",
                        help="the starting configuration of the search")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 3.0, 4.0])
    parser.add_argument("--slo-ms", type=float, default=1000.0)
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--search-requests", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the model runs (auto: the GPUs when CUDA is available)")
    parser.add_argument("--search-waits", type=float, nargs="+", default=None, metavar="MS",
                        help="max_wait_ms values the search also tries (default: the config's)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "examples"))
    from video_classifier import build

    with tempfile.TemporaryDirectory() as tmp:
        dataset = convert(args.videos, Path(tmp) / "ds")
        n = len(open_dataset(dataset))
        inputs = [k % n for k in range(args.requests)]
        naive_device, model_devices = pick_devices(args.device)
        config = load_config(args.config)
        config.dataset = str(dataset)
        config = config.replace(config.stages[-1].name, devices=model_devices)
        loader_options = dict(config.stages[0].options or {})

        print(f"search: p95 <= {args.slo_ms:g} ms, budget {args.budget_s:g} s, "
              f"{args.search_requests} requests per measurement", file=sys.stderr)
        found = search(config, inputs[:args.search_requests], slo_ms=args.slo_ms,
                       budget_s=args.budget_s, waits=args.search_waits, seed=args.seed,
                       log=lambda line: print(line, file=sys.stderr))
        picked = {s.name: {"replicas": s.replicas, "max_batch": s.max_batch,
                           "max_wait_ms": s.max_wait_ms} for s in found.best.stages}

        model = build(seed=0, device=naive_device)
        loader = VideoClipLoader(dataset, **loader_options)
        rows = []
        with InferServer(found.best) as server:
            run_bulk(server, inputs[:8], timeout=300)
            with torch.no_grad():  # warm the naive path too
                for sample in inputs[:2]:
                    model(loader([sample])[0][None].to(naive_device)).cpu()
            for rate in args.rates:
                # A B B A: drift in the machine's load (it is shared) hits both alike
                a1 = naive(inputs, rate, args.seed, model, loader, naive_device)
                b1 = chute(server, inputs, rate, args.seed)
                b2 = chute(server, inputs, rate, args.seed + 1)
                a2 = naive(inputs, rate, args.seed + 1, model, loader, naive_device)
                a, b = pooled([a1, a2]), pooled([b1, b2])
                rows.append((rate, a, b))
                print(f"rate {rate:g}: naive {a}, chute {b}", file=sys.stderr)

    def ok(r) -> bool:
        return r["p95"] is not None and r["p95"] <= args.slo_ms and not r["dropped"] \
            and not r["failed"]

    cores = len(os.sched_getaffinity(0))
    print(f"2 x {args.requests} requests (sample ids of {n} videos, repeated) per rate and "
          f"system, 16x112x112 clips, {cores} cores, SLO p95 <= {args.slo_ms:g} ms")
    print(f"model devices: (a) {naive_device}, (b) {', '.join(model_devices)}")
    print(format_trials(found.trials))
    print(f"picked by search ({found.seconds:.0f} s): {json.dumps(picked)}")
    print()
    print("| offered req/s | (a) naive req/s | (a) p95 ms | (a) meets SLO | (b) chute req/s | "
          "(b) p95 ms | (b) dropped | (b) meets SLO |")
    print("|---|---|---|---|---|---|---|---|")
    for rate, a, b in rows:
        p95 = "-" if b["p95"] is None else f"{b['p95']:.0f}"
        print(f"| {rate:g} | {a['throughput']:.2f} | {a['p95']:.0f} | "
              f"{'yes' if ok(a) else 'no'} | {b['throughput']:.2f} | {p95} | {b['dropped']} | "
              f"{'yes' if ok(b) else 'no'} |")
    best_a = max((r for r, a, _ in rows if ok(a)), default=0.0)
    best_b = max((r for r, _, b in rows if ok(b)), default=0.0)
    ratio = f"{best_b / best_a:.2f}x" if best_a else "n/a"
    print(f"\nsustained at p95 <= {args.slo_ms:g} ms: (a) naive {best_a:g} req/s, (b) chute "
          f"{best_b:g} req/s ({ratio})")


if __name__ == "__main__":
    main()
