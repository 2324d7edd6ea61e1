"""The chute Pipeline against MosaicML Streaming's and litdata's own loaders (issue 41), on the
same ImageNet JPEGs: each peer reads its own dataset, chute reads that dataset converted with
`chute convert mds|litdata`; train augment, one run, images/s and chute / peer ratios.

    .venv/bin/python benchmarks/bench_peer_loaders.py [--src DIR] [--images 1000]
        [--batch 64] [--epochs 1] [--json FILE]

Input: --images JPEGs of --src (../shared/data/imagenet-sample/images, 500 files: cycled to
reach --images, each copy a separate sample), written untimed as bench_convert_mds.py writes
them (its writers: MDSWriter {"image": "jpeg", "label": "int"} raw shards, litdata
BinaryWriter {"image": JpegImageFile, "label": int} uncompressed), then converted, untimed,
into chute datasets.
Loaders (threads or workers = every core this process may use):
  chute       Pipeline(converted, B, augment="train"), image: RandomResizedCrop 224 + flip +
              normalize, backend="cpu", float16 and float32 NCHW; label.
  streaming   streaming.StreamingDataset(local=mds, shuffle=True, batch_size=B), subclassed to
              transform each sample, + torch DataLoader(num_workers=cores).
  litdata     litdata.StreamingDataset(litdata dir, shuffle=True) with the same transform +
              litdata.StreamingDataLoader(num_workers=cores).
The peers' transform is bench_cpu.py's (e) one: PIL decode, torchvision's RandomResizedCrop
sampling (scale 0.08-1, ratio 3/4-4/3) with a bilinear resize of the box to 224, flip with
p 0.5, float32 normalize; (image, label) per sample, batched by the loader's default collate.
PIL decodes for both peers, torchvision installed or not: litdata's own jpeg deserializer needs
torchvision, so a serializer passed to its StreamingDataset hands over the stored bytes and the
transform decodes them, as it decodes MDS's lazily opened PIL image. Each loader runs in a fresh
process: one warm-up epoch (its rate reported apart) and then --epochs timed epochs; rate =
samples / seconds of the timed epochs (loader construction excluded); ratios = the rate of chute
(float16, float32) on the dataset converted from this row's peer format / this row's rate.

Needs mosaicml-streaming and litdata importable (the `test-peers` extra's notes in
pyproject.toml, or benchmarks/peer_streaming_env.sh); tests/convert/_peers.py's stand-in lets
streaming import without torchvision. Data stays in ../shared/data; datasets are written to a
temporary folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _datasets import machine_line
from bench_convert_mds import DEFAULT_SRC, _files, _write_litdata, _write_mds
from bench_cpu import _PilRandomResizedCrop

SIZE = 224
# the peers' workers start as in a user's script on Linux (fork), not as this script's
# spawned per-loader process would hand down
FORK = "fork"


class PilTrain(_PilRandomResizedCrop):
    """bench_cpu.py's PIL train transform applied to one sample's JPEG (bytes, or the lazily
    opened PIL image MDS's jpeg column gives); picklable for the loaders' workers."""

    def __init__(self) -> None:
        super().__init__((), SIZE)

    def __call__(self, encoded):
        # the parent opens self.paths[index]; MDS's image keeps its BytesIO in .fp
        self.paths = (encoded.fp if hasattr(encoded, "fp") else io.BytesIO(encoded),)
        return self[0]


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _epochs(make_loader, count, epochs: int, progress: str) -> dict:
    """Runs a warm-up epoch then `epochs` timed ones of the loader `make_loader()` returns;
    `count(batch)` is a batch's sample count. A loader with `set_epoch` gets each epoch's."""
    loader = make_loader()
    rates = []
    samples = seconds = 0
    try:
        for epoch in range(1 + epochs):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            start = time.perf_counter()
            n = sum(count(batch) for batch in loader)
            took = time.perf_counter() - start
            rates.append(n / took)
            if epoch:
                samples, seconds = samples + n, seconds + took
            print(f"  {progress}: epoch {epoch}{' (warm-up)' if not epoch else ''} {n} samples "
                  f"in {took:.2f} s, {n / took:.0f} img/s", file=sys.stderr, flush=True)
    finally:
        if hasattr(loader, "close"):
            loader.close()
    return {"warmup_images_per_s": rates[0], "samples": samples, "seconds": seconds,
            "images_per_s": samples / seconds}


def chute_loader(dataset: Path, batch: int, dtype: str):
    from chute import ImageOptions, Pipeline

    image = ImageOptions(size=SIZE, backend="cpu", dtype=dtype,
                         backend_options={"threads": _cores()})
    return Pipeline(str(dataset), batch, fields={"image": image, "label": None},
                    augment="train", device="cpu", drop_last=False, rank=0, world_size=1)


def streaming_loader(folder: Path, batch: int):
    import torch

    from tests.convert._peers import import_streaming

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()

    class Train(streaming.StreamingDataset):
        transform = PilTrain()

        def __getitem__(self, index):
            sample = super().__getitem__(index)
            return self.transform(sample["image"]), sample["label"]

    dataset = Train(local=str(folder), shuffle=True, batch_size=batch)
    return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=_cores(),
                                       multiprocessing_context=FORK)


def litdata_loader(folder: Path, batch: int):
    import litdata
    from litdata.streaming.serializers import JPEGSerializer

    class JpegBytes(JPEGSerializer):
        """litdata's jpeg leaves as their stored bytes: its own deserializer decodes with
        torchvision (absent here), PilTrain decodes with PIL instead."""

        def deserialize(self, data: bytes) -> bytes:
            return data

    transform = PilTrain()
    dataset = litdata.StreamingDataset(
        str(folder), shuffle=True, serializers={"jpeg": JpegBytes()},
        transform=lambda sample: (transform(sample["image"]), sample["label"]))
    return litdata.StreamingDataLoader(dataset, batch_size=batch, num_workers=_cores(),
                                       multiprocessing_context=FORK)


def _count(batch) -> int:
    return len(batch["label"]) if isinstance(batch, dict) else len(batch[1])


def run_loader(kind: str, folder: Path, batch: int, dtype: str, epochs: int,
               name: str) -> dict:
    """_epochs of one loader ("chute", "streaming" or "litdata") on `folder`."""
    if kind == "chute":
        return _epochs(lambda: chute_loader(folder, batch, dtype), _count, epochs, name)
    make = {"streaming": streaming_loader, "litdata": litdata_loader}[kind]
    return _epochs(lambda: make(folder, batch), _count, epochs, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[4:]))
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="a folder of JPEGs")
    parser.add_argument("--images", type=int, default=1000, help="samples (files cycled)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs after the warm-up")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"no images at {args.src} (see ../shared/data/README.md)", file=sys.stderr)
        return 1
    missing = [name for name in ("streaming", "litdata") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"not importable: {', '.join(missing)} (pyproject.toml's test-peers extra)",
              file=sys.stderr)
        return 1
    from chute.convert import ConvertOptions, convert_litdata, convert_mds

    files = _files(args.src, args.images)
    start_load = _load()
    tmp = Path(tempfile.mkdtemp(prefix="bench-peer-loaders-"))
    rows = []
    try:
        print(f"writing {len(files)} samples as MDS and litdata, converting both",
              file=sys.stderr, flush=True)
        options = ConvertOptions(progress=False, workers=1, shard_size="256MiB")
        _write_mds(files, tmp / "mds", None)
        _write_litdata(files, tmp / "litdata", None)
        convert_mds(tmp / "mds", tmp / "from-mds.chute", options)
        convert_litdata(tmp / "litdata", tmp / "from-litdata.chute", options)
        configs = [
            ("chute Pipeline", "from MDS", "float16", "mds", "chute", "from-mds.chute"),
            ("chute Pipeline", "from MDS", "float32", "mds", "chute", "from-mds.chute"),
            ("MosaicML Streaming + DataLoader, PIL", "MDS", "float32", "mds", "streaming",
             "mds"),
            ("chute Pipeline", "from litdata", "float16", "litdata", "chute",
             "from-litdata.chute"),
            ("chute Pipeline", "from litdata", "float32", "litdata", "chute",
             "from-litdata.chute"),
            ("litdata + StreamingDataLoader, PIL", "litdata", "float32", "litdata", "litdata",
             "litdata"),
        ]
        # one fresh process per loader: nothing one leaves behind (threads, forked workers,
        # shared memory) touches the next
        spawn = multiprocessing.get_context("spawn")
        for i, (loader, dataset, dtype, peer, kind, folder) in enumerate(configs, 1):
            name = f"{loader}, {dataset}, {dtype}"
            print(f"[{i}/{len(configs)}] {name}", file=sys.stderr, flush=True)
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                result = pool.submit(run_loader, kind, tmp / folder, args.batch, dtype,
                                     args.epochs, name).result()
            rows.append({"loader": loader, "dataset": dataset, "dtype": dtype, "peer": peer,
                         **result})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    chute = {(r["peer"], r["dtype"]): r["images_per_s"] for r in rows
             if r["loader"] == "chute Pipeline"}
    print(f"train RandomResizedCrop {SIZE} + flip + normalize, {len(files)} ImageNet JPEGs, "
          f"batch {args.batch}, {_cores()} threads / workers, 1 warm-up + {args.epochs} timed "
          f"epoch(s), one run; {machine_line()}; load average (1/5/15 min) {start_load} at the "
          f"start, {_load()} at the end")
    header = ["loader", "dataset", "output", "warm-up img/s", "img/s", "chute fp16 / this",
              "chute fp32 / this"]
    lines = [header, ["---"] * 3 + ["---:"] * 4]
    for row in rows:
        for dtype in ("float16", "float32"):
            row[f"chute_{dtype}_ratio"] = chute[row["peer"], dtype] / row["images_per_s"]
        lines.append([row["loader"], row["dataset"], row["dtype"],
                      f"{row['warmup_images_per_s']:.0f}", f"{row['images_per_s']:.0f}",
                      f"{row['chute_float16_ratio']:.2f}x", f"{row['chute_float32_ratio']:.2f}x"])
    print("\n".join("| " + " | ".join(cells) + " |" for cells in lines))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
