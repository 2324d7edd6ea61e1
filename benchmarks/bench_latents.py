"""Precomputed latents: the usual zarr + DataLoader loader vs chute, side by side in one run.

    python benchmarks/bench_latents.py [--segments 2000] [--videos 400] [--samples 2000]
        [--repeat N]

Writes (outside the repository, in a temporary folder) two zarr stores with
benchmarks/make_latents.py, chunk 1: zstd and uncompressed; converts the uncompressed one to
chute datasets (uncompressed and zstd). Then, at batch 1 and 64, on the same cores, over
--samples random segments, delivering `base_frames` and the looked-up `clip_emb`:
  (a) a map-style torch Dataset indexing the zarr arrays per segment, DataLoader with one worker
      per core and pin_memory=True;
  (b) chute reading the zarr store directly (zstd and uncompressed);
  (c) chute on the converted datasets (uncompressed and zstd);
  (d) bounds: memcpy of the same bytes; zstd decompression alone of the same chunks.
Prints a markdown table: segments/s, GB/s (of base_frames + clip_emb bytes), ratio to (a).

    python benchmarks/bench_latents.py --chunk-rows 64 [--segments 2000] [--frames 4]
        [--samples 2000] [--repeat N]

instead measures chunks of many rows (issue 27 item 11): one zstd store chunked --chunk-rows
segments, chute reading `base_frames` at batch 16 and 64, shuffled and in order, with the
per-process chunk cache off (`chunk_cache=0`: each batch decodes every chunk it touches, as
before the cache) and on (a cache smaller than the store, and the default 256 MiB). Prints
rows/s and the chunks decoded per epoch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_latents import make_latents  # noqa: E402

from chute.convert import convert_zarr  # noqa: E402
from chute.pipelines import Lookup, Pipeline  # noqa: E402
from chute.readers.zarr._zarr_chunks import read_threads  # noqa: E402

# the segment's frames, and its video's embedding through the segment_to_video index
FIELDS = {"base_frames": None, "clip_emb": Lookup("segment_to_video")}


class ZarrSegments(torch.utils.data.Dataset):
    """The usual loader: zarr indexing per segment, opened lazily in each worker."""

    def __init__(self, path: str):
        self.path = path
        self.arrays = None
        import zarr

        self.n = zarr.open_group(path, mode="r")["base_frames"].shape[0]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.arrays is None:
            import zarr

            group = zarr.open_group(self.path, mode="r")
            self.arrays = (group["base_frames"], group["clip_emb"],
                           group["segment_to_video"][...])
        frames, emb, index = self.arrays
        return torch.from_numpy(frames[i]), torch.from_numpy(emb[int(index[i])])


def run_dataloader(path: Path, batch: int, samples: int) -> float:
    loader = torch.utils.data.DataLoader(
        ZarrSegments(str(path)), batch_size=batch, shuffle=True, num_workers=os.cpu_count(),
        pin_memory=True, drop_last=True, persistent_workers=False,
        generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    next(it)  # workers started, stores opened
    t0, done = time.perf_counter(), 0
    for frames, _ in it:
        done += len(frames)
        if done >= samples:
            break
    return done / (time.perf_counter() - t0)


def run_chute(path: Path, batch: int, samples: int) -> float:
    from chute.readers import open_dataset

    # a zarr store's arrays differ in first dimension (segments, videos): name the samples
    source = open_dataset(path, sample_array="base_frames") if path.suffix == ".zarr" else path
    with Pipeline(source, batch, fields=FIELDS, device="cpu") as pipe:
        it = iter(pipe)
        next(it)
        t0, done = time.perf_counter(), 0
        for b in it:
            done += len(b["index"])
            if done >= samples:
                break
        return done / (time.perf_counter() - t0)


def run_memcpy(sample_bytes: int, batch: int, samples: int) -> float:
    src = np.random.default_rng(0).integers(0, 255, (256, sample_bytes), np.uint8)
    dst = np.empty((batch, sample_bytes), np.uint8)
    t0, done = time.perf_counter(), 0
    rng = np.random.default_rng(1)
    while done < samples:
        np.take(src, rng.integers(0, 256, batch), axis=0, out=dst)
        done += batch
    return done / (time.perf_counter() - t0)


def run_decompress(path: Path, batch: int, samples: int) -> float:
    """zstd decompression alone of base_frames chunks (chunk 1: one per segment), the bytes
    read into memory beforehand, measured as (b) decompresses: the same threads and pool
    (chute's chunk readers), the same decoder (libzstd's one-shot call with a context per
    thread, by the C shim when it builds, else per chunk from Python), every batch
    decompressed straight into one [batch, ...] buffer."""
    from chute.readers import open_dataset
    from chute.readers.zarr._chunk_native import chunk_reader_status, read_chunks
    from chute.readers.zarr._zarr_chunks import _pool, _zstd_decode

    chunks = [path / "base_frames" / "c" / str(i) / "0" / "0" / "0" / "0" for i in range(256)]
    raw = [p.read_bytes() for p in chunks if p.is_file()]
    out = np.empty((batch, *open_dataset(path).reader("base_frames").sample_shape), np.float16)
    row_bytes = out[0].nbytes
    dests = out.ctypes.data + np.arange(batch, dtype=np.uintp) * np.uintp(row_bytes)
    rng = np.random.default_rng(2)
    native = chunk_reader_status().available

    def one(job):
        row, k = job
        _zstd_decode(raw[k], out=out[row:row + 1])

    t0, done = time.perf_counter(), 0
    while done < samples:
        picks = rng.integers(0, len(raw), batch).tolist()
        if native:
            status = read_chunks(True, dests, row_bytes, _pool(), read_threads(),
                                 sources=[raw[k] for k in picks])
            assert not status.any()
        else:
            list(_pool().map(one, enumerate(picks)))
        done += batch
    return done / (time.perf_counter() - t0)


def run_chunked(path: Path, batch: int, samples: int, shuffle,
                cache: str | int) -> tuple[float, int]:
    """rows/s of `base_frames` from a store of many-row chunks, and the chunks decoded."""
    from chute.readers import open_dataset
    from chute.readers.zarr import _zarr_chunks

    decoded = [0]
    load = _zarr_chunks._load

    def counted(*args, **kwargs):
        decoded[0] += 1
        return load(*args, **kwargs)

    _zarr_chunks._load = counted  # type: ignore[assignment]
    try:
        ds = open_dataset(path, sample_array="base_frames", chunk_cache=cache)
        with Pipeline(ds, batch, fields={"base_frames": None}, device="cpu",
                      order=shuffle, seed=0) as pipe:
            t0, done = time.perf_counter(), 0
            while done < samples:
                for b in pipe:
                    done += len(b["index"])
                    if done >= samples:
                        break
            return done / (time.perf_counter() - t0), decoded[0]
    finally:
        _zarr_chunks._load = load  # type: ignore[assignment]


def main_chunked(args) -> None:
    with tempfile.TemporaryDirectory(prefix="chute-latents-") as tmp:
        store = make_latents(Path(tmp) / "chunked.zarr", args.segments, args.videos,
                             args.chunk_rows, "zstd", frames=args.frames)
        row = args.frames * 4 * 32 * 32 * 2
        chunk_mib = args.chunk_rows * row / 2**20
        small = max(1, args.segments // args.chunk_rows // 4) * args.chunk_rows * row
        caches = {"off (0)": 0, f"{small / 2**20:.0f} MiB (1/4 of the store)": small,
                  "256 MiB (default)": "256MiB"}
        print(f"segments {args.segments}, {row} B/segment, chunks of {args.chunk_rows} rows "
              f"({chunk_mib:.1f} MiB decoded), store {args.segments * row / 2**20:.0f} MiB, "
              f"{os.cpu_count()} cores, median of {args.repeat} run(s), {args.samples} rows "
              "per run\n")
        print("| batch | order | chunk cache | rows/s | chunks decoded |")
        print("|---:|---|---|---:|---:|")
        from chute import ShardWindows

        # a shuffle of windows of 4 chunks (ShardWindows on a zarr group: issue 27)
        orders = {"shuffled": "shuffle", "windows of 4 chunks": ShardWindows(shards=4),
                  "in order": "sequential"}
        for batch in (16, 64):
            for order, shuffle in orders.items():
                for name, cache in caches.items():
                    runs = [run_chunked(store, batch, args.samples, shuffle, cache)
                            for _ in range(args.repeat)]
                    rate = float(np.median([r for r, _ in runs]))
                    print(f"| {batch} | {order} | {name} | {rate:,.0f} | {runs[-1][1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=2000)
    parser.add_argument("--videos", type=int, default=400)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure every row this many times, in turn; report medians")
    parser.add_argument("--chunk-rows", type=int, default=None,
                        help="measure a store of chunks this many rows long instead (cache "
                        "off and on)")
    args = parser.parse_args()
    if args.chunk_rows:
        main_chunked(args)
        return
    with tempfile.TemporaryDirectory(prefix="chute-latents-") as tmp:
        tmp = Path(tmp)
        zstd = make_latents(tmp / "zstd.zarr", args.segments, args.videos, 1, "zstd",
                            frames=args.frames)
        plain = make_latents(tmp / "none.zarr", args.segments, args.videos, 1, "none",
                             frames=args.frames)
        convert_zarr(plain, tmp / "none.chute", sample_array="base_frames")
        convert_zarr(plain, tmp / "zstd.chute", compression="zstd", sample_array="base_frames")
        sample_bytes = args.frames * 4 * 32 * 32 * 2 + 512 * 2
        rows, ratios = [], []
        for batch in (1, 64):
            n = args.samples if batch > 1 else args.samples // 4
            bound = f"(d) zstd decompression bound ({read_threads()} threads)"
            runs = {
                "(a) zarr + DataLoader (zstd store)": (run_dataloader, zstd),
                "(b) chute on zarr, zstd": (run_chute, zstd),
                "(b) chute on zarr, uncompressed": (run_chute, plain),
                "(c) chute converted, uncompressed": (run_chute, tmp / "none.chute"),
                "(c) chute converted, zstd": (run_chute, tmp / "zstd.chute"),
                "(d) memcpy bound": (run_memcpy, sample_bytes),
                bound: (run_decompress, zstd),
            }
            rates: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.repeat):  # in turn, so load changes hit every row alike
                for name, (fn, source) in runs.items():
                    rates[name].append(fn(source, batch, n))
                ratios.append((batch, rates["(b) chute on zarr, zstd"][-1] / rates[bound][-1]))
            base = float(np.median(rates["(a) zarr + DataLoader (zstd store)"]))
            for name, found in rates.items():
                rate = float(np.median(found))
                rows.append((batch, name, rate, rate * sample_bytes / 1e9, rate / base))
    print(f"segments {args.segments}, {sample_bytes} B/segment, {os.cpu_count()} cores, "
          f"median of {args.repeat} run(s)\n")
    print("| batch | loader | segments/s | GB/s | x (a) |")
    print("|---:|---|---:|---:|---:|")
    for batch, name, rate, gbs, ratio in rows:
        print(f"| {batch} | {name} | {rate:,.0f} | {gbs:.2f} | {ratio:.1f} |")
    for batch in (1, 64):
        found = [f"{r:.2f}" for b, r in ratios if b == batch]
        print(f"\nbatch {batch}: (b) zstd / (d) decompression bound, each repeat: "
              f"{', '.join(found)}")

if __name__ == "__main__":
    main()
