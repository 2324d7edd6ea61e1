"""Several processes sharing one node cache a quarter of the dataset's size (issue 37 item 9),
at the issue's sizes, through the full Pipeline: each process reads one epoch of a dataset in
S3 (moto's server on loopback, tests/_s3.py) into one cache folder under `cache_limit`.

    .venv/bin/python benchmarks/bench_shared_cache.py [--src DIR] [--processes 4]
        [--json FILE]

Configurations (JPEGs from --src repeated to about 4 x the limit, cpu backend, eval resize
224, batch 32, each a global shuffle and ShardWindows(shards=2)):
  (a) "ddp": 4 processes as the ranks of one job (rank r of world 4), a 40 MiB cache;
  (b) "plain": 4 processes each reading the whole dataset (world 1), a 12 MiB cache.
A row: every process's samples (each must be its whole share) and seconds, the cache's
largest size on disk (sampled every 0.2 s under the cache's lock) against the limit, and any
failure in one line. CHUTE_CACHE_WAIT_SECONDS is 120: before the fix, processes waited
600 s, then failed with CacheFullError.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_remote import BUCKET, DEFAULT_SRC, ROOT, folder_bytes, image_folder, one_line

from chute.readers.storage._node_cache import _EVICT_LOCK

MIB = 1 << 20
CONFIGS = [("ddp", 40 * MIB), ("plain", 12 * MIB)]


def _epoch(
    url: str, cache: str, limit: int, who: int, rank: int, world: int, order: str, out
) -> None:
    import torch

    from chute import ImageOptions, Pipeline, ShardWindows
    from chute.readers import open_dataset

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        dataset = open_dataset(url, cache_dir=cache, cache_limit=limit)
        shuffle = ShardWindows(shards=2) if order == "windows" else "shuffle"
        image = ImageOptions(size=224, backend="cpu", dtype="uint8", backend_options={"threads": 1})
        pipe = Pipeline(
            dataset,
            32,
            fields={"image": image},
            augment="eval",
            device="cpu",
            order=shuffle,
            drop_last=False,
            rank=rank,
            world_size=world,
        )
        try:
            seen = sum(len(b["index"]) for b in pipe)
        finally:
            pipe.close()
        share = len(dataset) if world == 1 else None
        dataset.close()
        out.put((who, "ok", seen, share, time.perf_counter() - t0))
    except BaseException as exc:  # noqa: BLE001 - reported as a row
        out.put((who, "failed", 0, None, one_line(exc)))


def _bytes_in(folder: Path) -> int:
    """Bytes of the regular files under `folder`, counted under the cache's lock (shared):
    every reservation, download settled and eviction happens under it exclusively, so the
    walk sees one state of the folder, not files of several moments."""
    if not (folder / _EVICT_LOCK).is_file():
        return 0
    total = 0
    with open(folder / _EVICT_LOCK, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        for p in folder.rglob("*"):
            with contextlib.suppress(OSError):
                if p.is_file() and not p.is_symlink():
                    total += p.stat().st_size
    return total


def run(url: str, tmp: Path, mode: str, limit: int, order: str, processes: int) -> dict:
    cache = tmp / f"cache-{mode}-{order}"
    world = processes if mode == "ddp" else 1
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_epoch,
            args=(url, str(cache), limit, r, r if world > 1 else 0, world, order, out),
        )
        for r in range(processes)
    ]
    largest, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            largest[0] = max(largest[0], _bytes_in(cache))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(30)
    stop.set()
    watcher.join()
    return {
        "mode": mode,
        "order": order,
        "limit_mib": limit / MIB,
        "processes": processes,
        "seconds": round(time.perf_counter() - t0, 1),
        "largest_cache_mib": round(largest[0] / MIB, 2),
        "results": sorted(results, key=lambda r: r[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from chute.convert import ConvertOptions, convert_imagefolder
    from chute.readers import open_dataset
    from tests._s3 import S3Server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    server.create_bucket(BUCKET)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(var, None)
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=server.endpoint,
        CHUTE_CACHE_WAIT_SECONDS="120",
    )
    rows = []
    src_files = [p for p in args.src.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg")]
    mean = folder_bytes(args.src) / max(len(src_files), 1)
    try:
        with tempfile.TemporaryDirectory(prefix="chute-bench-shared-") as name:
            tmp = Path(name)
            os.environ["AWS_CONFIG_FILE"] = str(tmp / "no-aws-config")
            os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp / "no-aws-credentials")
            for mode, limit in CONFIGS:
                count = int(4 * limit / mean)
                folder = image_folder(args.src, count, tmp / f"images-{mode}")
                url = f"s3://{BUCKET}/{mode}"
                shard = f"{max(limit // (8 * MIB), 1)}MiB"
                convert_imagefolder(folder, url, ConvertOptions(shard_size=shard, progress=False))
                probe = open_dataset(url, cache_dir=tmp / "probe")
                total = sum(
                    e["size"] for s in probe.manifest["shards"] for e in s["files"].values()
                )
                print(
                    f"{mode}: {len(probe)} images, {len(probe.manifest['shards'])} shards "
                    f"of {shard}, {total / MIB:.1f} MiB, cache_limit {limit / MIB:.0f} MiB",
                    flush=True,
                )
                probe.close()
                for order in ("global", "windows"):
                    row = run(url, tmp, mode, limit, order, args.processes)
                    row.update(images=count, dataset_mib=round(total / MIB, 1))
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        server.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
