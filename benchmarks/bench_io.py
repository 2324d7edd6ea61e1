"""Read throughput of a chute dataset vs. the plain image files it was converted from.

    python benchmarks/bench_io.py [FOLDER] [--batch 256] [--trials 3]

FOLDER (default ../shared/data/imagenet-sample/images) holds images, flat or in class
sub-folders. It is converted to a temporary chute dataset (outside the repository), the page
cache is warmed, then in one run, side by side, over the same random order:
  - open().read() of each source file (the baseline),
  - open_dataset random access: zero-copy views (first byte touched), views copied out, ds[i],
  - gather of random batches into one contiguous preallocated buffer,
  - the vectorised index lookup of a gather alone (ids -> sizes + offsets).
Prints a markdown table (median of --trials) and the dataset's index overhead.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from chute.convert import ConvertOptions, convert_csv, convert_imagefolder
from chute.convert._sources import IMAGE_EXTENSIONS
from chute.readers import dataset_info, open_dataset

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-sample" / "images"


def convert(folder: Path, dst: Path, workers: int | None) -> None:
    options = ConvertOptions(workers=workers, progress=False)
    if any(p.is_dir() for p in folder.iterdir()):
        convert_imagefolder(folder, dst, options)
        return
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    table = dst.parent / "files.csv"
    with open(table, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path"])
        writer.writerows([[p.name] for p in files])
    convert_csv(table, dst, options, root=folder)


def warm(paths) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(8 << 20):
                pass


def timed(fn, trials: int) -> float:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=0,
                        help="gather batches per trial (default: enough for ~4 epochs)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="conversion processes")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"{args.folder}: no such folder; pass a folder of images", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="chute-bench-io-"))
    try:
        dst = tmp / "bench.chute"
        start = time.perf_counter()
        convert(args.folder, dst, args.workers)
        convert_s = time.perf_counter() - start
        ds = open_dataset(dst)
        n = len(ds)
        root = args.folder
        sources = [root / ds[i]["meta"]["key"] for i in range(n)]
        warm(sources)
        warm(p for p in dst.rglob("*") if p.is_file())

        rng = np.random.default_rng(0)
        order = rng.permutation(n)
        order_list = order.tolist()
        total_bytes = int(ds.sizes(order).sum())
        batches = args.batches or max(1, 4 * n // args.batch)
        batch_ids = [rng.integers(0, n, args.batch) for _ in range(batches)]
        gather_bytes = int(sum(ds.sizes(ids).sum() for ids in batch_ids))
        out = np.empty(int(ds.sizes().max()) * args.batch, np.uint8)

        def plain_read():
            for i in order_list:
                with open(sources[i], "rb") as f:
                    f.read()

        def views_touch():
            acc = 0
            for view in ds.views(order):
                acc += int(view[0]) if view.size else 0
            return acc

        def views_copy():
            for view in ds.views(order):
                view.copy()

        def getitem():
            for i in order_list:
                ds[i]["image"].copy()

        def gather():
            for ids in batch_ids:
                ds.gather(ids, out=out)

        def lookup():
            for ids in batch_ids:
                offsets = np.zeros(len(ids) + 1, np.int64)
                np.cumsum(ds.sizes(ids), out=offsets[1:])

        rows = [
            ("plain files: open().read()", plain_read, n, total_bytes),
            # zero-copy: the payload bytes are not moved, so no GB/s
            ("open_dataset: zero-copy views (touch 1st byte)", views_touch, n, 0),
            ("open_dataset: views copied out", views_copy, n, total_bytes),
            ("open_dataset: ds[i] (all fields) + copy", getitem, n, total_bytes),
            (f"gather {args.batch} random ids -> contiguous buffer", gather,
             batches * args.batch, gather_bytes),
            (f"gather index lookup only ({args.batch} ids)", lookup, batches * args.batch, 0),
        ]
        results = []
        for name, fn, count, nbytes in rows:
            seconds = timed(fn, args.trials)
            results.append((name, count / seconds, nbytes / seconds))
        base = results[0][1]
        info = dataset_info(dst)
        mib = info["bytes"]["payload"] / 2**20
        print(f"\n{n} images, {mib:.1f} MiB payload from {args.folder}; converted in "
              f"{convert_s:.2f} s; page cache warm; median of {args.trials} trials\n")
        print("| read path | samples/s | GB/s | vs open().read() |")
        print("|---|---:|---:|---:|")
        for name, rate, byte_rate in results:
            gbs = f"{byte_rate / 1e9:.2f}" if byte_rate else "-"
            print(f"| {name} | {rate:,.0f} | {gbs} | {rate / base:.1f}x |")
        lookup_share = 100 * results[4][1] / results[5][1]
        print(f"\nindex lookup share of gather time: {lookup_share:.2f}%")
        print(f"index + column overhead: {info['overhead_pct']:.3f}% of payload "
              f"(metadata {info['metadata_pct']:.3f}%), {info['shards']} shard(s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
