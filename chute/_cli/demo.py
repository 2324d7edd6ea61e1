"""`chute demo`: the main job end to end — build a sample dataset, read it back, autotune,
then stream a few epochs through a Pipeline with the chosen backend and print throughput."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from chute._cli._args import default_device, image_size, positive

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="build a sample dataset, autotune, stream a few epochs, print throughput",
        description="Build a sample chute dataset (synthetic JPEGs, or the images of --source), "
        "read it back, autotune the backends for the batch shape, then stream --epochs epochs "
        "through a Pipeline with the chosen backend and print img/s per epoch.",
    )
    p.add_argument("--source", type=Path, default=None, metavar="DIR",
                   help="an image folder (class sub-folders, or flat) to use instead of "
                   "synthetic images, e.g. ../shared/data/imagenet-sample/images")
    p.add_argument("--workdir", type=Path, default=Path("demo-data"),
                   help="where the sample images and dataset are written (default ./demo-data)")
    p.add_argument("--images", type=positive(int), default=512,
                   help="number of synthetic images (default 512; ignored with --source)")
    p.add_argument("--batch-size", type=positive(int), default=64)
    p.add_argument("--image-size", type=image_size, default=224, help="S or HxW (default 224)")
    p.add_argument("--augment", choices=("train", "eval"), default="train")
    p.add_argument("--epochs", type=positive(int), default=3)
    p.add_argument("--budget", type=positive(float), default=30.0, metavar="SECONDS",
                   help="time budget of the autotune step (default 30)")
    p.set_defaults(func=run)
    return p


def _build_dataset(args) -> Path:
    from chute._sample_images import write_image_folder
    from chute.readers import ConvertOptions, convert_imagefolder

    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.source is not None:
        if not args.source.is_dir():
            raise SystemExit(f"chute demo: --source {args.source} is not a directory; give an "
                             "image folder (class sub-folders of images)")
        images = args.source
    else:
        images = args.workdir / "images"
        if images.exists():
            shutil.rmtree(images)
        print(f"[1/4] writing {args.images} synthetic JPEGs to {images}")
        write_image_folder(images, args.images, seed=0)
    dst = args.workdir / "sample.chute"
    print(f"[1/4] converting {images} -> {dst}")
    report = convert_imagefolder(images, dst, ConvertOptions(overwrite=True))
    print(f"      {report.written} samples written, {len(report.skipped)} skipped")
    return dst


def _read_back(path: Path) -> None:
    import numpy as np

    from chute.readers import dataset_info, open_dataset

    ds = open_dataset(path)
    info = dataset_info(path)
    ids = np.random.default_rng(0).permutation(len(ds))
    start = time.perf_counter()
    total = 0
    for i in ids:
        total += ds[int(i)]["image"].nbytes
    seconds = time.perf_counter() - start
    print(f"[2/4] read back {len(ds)} samples in random order: {len(ds) / seconds:,.0f} samples/s, "
          f"{total / seconds / 1e9:.2f} GB/s; index overhead {info['overhead_pct']:.2f}%")


def _autotune(path: Path, args) -> None:
    from chute._auto_backend import tune_dataset
    from chute.autotune import TuneParams, format_table

    device = default_device()
    params = TuneParams(args.batch_size, args.image_size, args.augment, "float16", device)
    print(f"[3/4] autotune: batch {args.batch_size}, {args.image_size}px, {args.augment}, "
          f"float16 on {device} (budget {args.budget:g}s)")
    result = tune_dataset(path, params, budget=args.budget, progress=True)
    print(format_table(result))


def _stream(path: Path, args) -> None:
    from tqdm import tqdm

    from chute import Pipeline

    with Pipeline(path, args.batch_size, image_size=args.image_size, augment=args.augment,
                  backend="auto") as pipe:
        print(f"[4/4] streaming {args.epochs} epochs with backend {pipe.stats.backend!r} "
              f"({pipe.stats.backend_reason})")
        for epoch in range(args.epochs):
            pipe.set_epoch(epoch)
            n = 0
            start = time.perf_counter()
            for batch in tqdm(pipe, desc=f"epoch {epoch}", unit="batch", leave=False):
                n += batch["image"].shape[0]
            seconds = time.perf_counter() - start
            note = " (includes JIT compile and cold caches)" if epoch == 0 else ""
            print(f"      epoch {epoch}: {n} images, {n / seconds:,.0f} img/s{note}")
        print(f"      decode errors replaced: {pipe.stats.decode_errors}; "
              f"consumer waited {pipe.stats.wait_seconds:.2f}s in total")


def run(args) -> int:
    path = _build_dataset(args)
    _read_back(path)
    _autotune(path, args)
    _stream(path, args)
    return 0
