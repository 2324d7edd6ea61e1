"""Multi-crop views (DINO: 2 x 224 + 6 x 96 per image) on the CPU, side by side in one run.

    .venv/bin/python benchmarks/bench_views.py [--images DIR] [--batch 64] [--threads N]
        [--reps 3] [--limit N]

Configurations, on the same images and the same number of threads (docs/views.md):
  (a) chute views: one Pipeline with ImageOptions(views=[View(224, scale=(0.32, 1.0),
      count=2), View(96, scale=(0.05, 0.32), count=6)]): each JPEG decoded once, every view
      resampled from that decode;
  (b) chute, each view decoded separately: 8 passes of a single-view Pipeline, view v's with
      seed view_seed(seed, v) and view v's crop (the very boxes and flips of (a));
  (c) a torchvision-style multi-crop Dataset in a torch DataLoader (one worker per thread):
      PIL decode, then per view RandomResizedCrop (PIL's box resize, bilinear, as
      torchvision's resized_crop on PIL images) + horizontal flip + ToTensor + Normalize
      (written out here: torchvision is not a dependency; no colour jitter in any contender);
  (d) the ceiling of any CPU loader that decodes each JPEG whole: chute's decoder decoding every
      image at full size (no DCT scaling, no ROI) into an 8x8 output, nothing else -- what one
      decode costs, the part (a) cannot avoid (views of one image cover most of it).
All outputs are float32 NCHW normalised. Every configuration makes one warm-up pass, then all
are timed round-robin for --reps rounds; the table gives the median images (samples of 8
views) per second and the ratio of (a) to each. The images are written to a temporary chute
dataset (never into the repository).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _datasets import DINO_VIEWS, jpeg_files, machine_line, write_jpeg_dataset
from PIL import Image

from chute import CropConfig, ImageOptions, Pipeline
from chute.fallbacks import IMAGENET_MEAN, IMAGENET_STD, decode_batch
from chute.pipelines import view_seed
from chute.readers import open_dataset

DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared/data/imagenet-sample/images"
SEED = 0


def chute_views(path: Path, batch: int, threads: int):
    image = ImageOptions(views=DINO_VIEWS, backend="cpu", dtype="float32",
                         backend_options={"threads": threads})
    pipe = Pipeline(path, batch, fields={"image": image}, device="cpu", seed=SEED, rank=0,
                    world_size=1, drop_last=False)

    def run() -> int:
        return sum(len(b["index"]) for b in pipe)
    return run


def chute_separate(path: Path, batch: int, threads: int):
    expanded = [v for v in DINO_VIEWS for _ in range(v.count)]
    pipes = []
    for v, view in enumerate(expanded):
        crop = CropConfig(scale=view.scale, ratio=view.ratio, flip_p=view.flip_p)
        image = ImageOptions(size=view.size, crop=crop, backend="cpu", dtype="float32",
                             backend_options={"threads": threads})
        pipes.append(Pipeline(path, batch, fields={"image": image}, device="cpu",
                              seed=view_seed(SEED, v), rank=0, world_size=1, drop_last=False))

    def run() -> int:
        counts = [sum(len(b["index"]) for b in pipe) for pipe in pipes]
        return counts[0]  # images with all 8 views
    return run


class MultiCropDataset(torch.utils.data.Dataset):
    """torchvision-style DINO multi-crop on PIL images (RandomResizedCrop + flip + ToTensor +
    Normalize per view)."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.mean = np.array(IMAGENET_MEAN, np.float32).reshape(3, 1, 1)
        self.std = np.array(IMAGENET_STD, np.float32).reshape(3, 1, 1)
        self.views = [(v.size[0], v.scale) for v in DINO_VIEWS for _ in range(v.count)]

    def __len__(self) -> int:
        return len(self.paths)

    @staticmethod
    def _box(width, height, scale):
        area = width * height
        log_ratio = (math.log(3 / 4), math.log(4 / 3))
        for _ in range(10):
            target = area * random.uniform(*scale)
            aspect = math.exp(random.uniform(*log_ratio))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        side = min(width, height)
        return (height - side) // 2, (width - side) // 2, side, side

    def __getitem__(self, index):
        with Image.open(self.paths[index]) as im:
            im = im.convert("RGB")
            out = []
            for size, scale in self.views:
                top, left, h, w = self._box(*im.size, scale)
                view = im.resize((size, size), Image.BILINEAR,
                                 box=(left, top, left + w, top + h))
                if random.random() < 0.5:
                    view = view.transpose(Image.FLIP_LEFT_RIGHT)
                chw = np.asarray(view, dtype=np.float32).transpose(2, 0, 1) / 255.0
                out.append(torch.from_numpy((chw - self.mean) / self.std))
        return out


def decode_only(path: Path, batch: int, threads: int):
    ds = open_dataset(path)
    sizes = np.stack([np.asarray(ds.column("height")), np.asarray(ds.column("width"))], 1)
    batches = [np.arange(s, min(s + batch, len(ds))) for s in range(0, len(ds), batch)]

    def run() -> int:
        for ids in batches:
            data, offsets = ds.gather(ids, "image")
            boxes = np.zeros((len(ids), 4), np.float64)
            boxes[:, 2:] = sizes[ids]
            out = np.empty((len(ids), 3, 8, 8), np.uint8)
            status = decode_batch(data, offsets, boxes, np.zeros(len(ids), bool), out,
                                  dct_scaling=False, roi_decode=False, threads=threads)
            if status.any():
                raise SystemExit(f"decode_only: {int((status != 0).sum())} images failed")
        return len(ds)
    return run


def torchvision_style(paths: list[Path], batch: int, threads: int):
    loader = torch.utils.data.DataLoader(MultiCropDataset(paths), batch_size=batch,
                                         num_workers=threads, persistent_workers=True,
                                         shuffle=True, prefetch_factor=2)

    def run() -> int:
        return sum(len(b[0]) for b in loader)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="use the first N images")
    args = parser.parse_args()
    if not args.images.is_dir():
        sys.exit(f"{args.images}: no such folder (see ../shared/data/README.md); pass --images")
    files = jpeg_files(args.images)[:args.limit]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="chute-bench-views-") as tmp:
        path = write_jpeg_dataset(files, Path(tmp) / "images.chute")
        baseline = (f"(c) torchvision-style multi-crop Dataset + DataLoader ({args.threads} "
                    "workers)")
        ceiling_row = "(d) ceiling: each JPEG decoded whole by chute's decoder, nothing else"
        runners = {
            "(a) chute views (one decode, 8 views)": chute_views(path, args.batch,
                                                                 args.threads),
            "(b) chute, each view decoded separately (8 passes)":
                chute_separate(path, args.batch, args.threads),
            baseline: torchvision_style(files, args.batch, args.threads),
            ceiling_row: decode_only(path, args.batch, args.threads),
        }
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for run in runners.values():
            run()  # warm-up: Numba kernels loaded, workers started, files cached
        for _ in range(args.reps):
            for name, run in runners.items():
                t0 = time.perf_counter()
                images = run()
                rates[name].append(images / (time.perf_counter() - t0))
    ours = statistics.median(rates[next(iter(rates))])
    print(f"{len(files)} JPEGs from {args.images}, batch {args.batch}, {args.threads} threads, "
          f"{args.reps} reps; DINO views 2 x 224 + 6 x 96, float32 NCHW")
    print(machine_line())
    print(f"{'configuration':<78} {'images/s':>9} {'min-max':>15} {'(a) / this':>10}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:<78} {median:9.1f} {min(values):7.1f}-{max(values):<7.1f} "
              f"{ours / median:10.2f}")
    ceiling = statistics.median(rates[ceiling_row]) / statistics.median(rates[baseline])
    print(f"the most (a) / (c) any loader decoding each JPEG whole could reach here: "
          f"{ceiling:.2f} ((d) / (c))")


if __name__ == "__main__":
    main()
