"""Fidelity of every image backend and option against PIL references, on real JPEGs.

    .venv/bin/python benchmarks/bench_fidelity.py [--images DIR] [--sizes 224 128 64]
        [--limit N] [--threads N] [--batch 64] [--no-dali] [--json]

Backends: cpu (every option), dali-native in DALI's CPU mode (when DALI imports) and the CPU
twin of nvimgcodec (when nvImageCodec imports); the GPU paths need a GPU and are not run here.

The JPEGs of DIR (any depth; default ../shared/data/imagenet-sample/images) are stored as they
are in a temporary chute dataset. Each configuration (backend x augment x eval_crop x
dct_scaling x roi_decode) is one epoch of a `Pipeline` delivering
`ImageOptions(dtype="uint8", layout="NHWC")` images, and every delivered image is compared
with two references computed with PIL alone:

- "same box": PIL's `Image.resize((S, S), BILINEAR, box=...)` of the very box (fractional where
  the configuration's boxes are) and flip the Pipeline used. It measures how exactly a backend
  implements the shared resize definition (docs/design.md, "Resize definition"); PIL rounds to
  uint8 between its two passes, chute does not, so about 0.2 is the floor.
- "torchvision eval" (eval configurations): torchvision's validation transform through PIL,
  `Resize(round(S / 0.875))` (shorter side, `Image.BILINEAR`, antialiased on downscale; the long
  side `int(R * long / short)`) then `CenterCrop(S)` at `int(round((resized - S) / 2.0))`. It
  measures what users compare published accuracies with.

For each reference the table gives, in 0-255 units, the median and the 99th percentile over
images of the per-image mean absolute difference (MAE), and the largest absolute difference of
any pixel. EXIF orientation is ignored on both sides (chute uses pixels as stored).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _datasets import jpeg_files, write_jpeg_dataset
from PIL import Image

from chute.pipelines import CropConfig, ImageOptions, Pipeline
from chute.pipelines.producers.image._crops import crop_boxes
from chute.readers import open_dataset

DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared/data/imagenet-sample/images"
FRACTION = 0.875


@dataclass(frozen=True)
class Config:
    """One measured configuration: a Pipeline's backend and options."""

    backend: str
    augment: str
    eval_crop: str = "torchvision"
    options: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        crop = f" {self.eval_crop}" if self.augment == "eval" else ""
        opts = "".join(f" {k}={'on' if v else 'off'}" if isinstance(v, bool) else f" {k}={v}"
                       for k, v in self.options.items())
        return f"{self.backend} {self.augment}{crop}{opts}"


def configurations(dali: bool, nvimgcodec: bool) -> list[Config]:
    """Every backend and option this machine can run; defaults first."""
    configs = [
        Config("cpu", "eval"),  # the default eval: torchvision crop, no DCT scaling, ROI decode
        Config("cpu", "eval", options={"dct_scaling": True}),
        Config("cpu", "eval", options={"roi_decode": False}),
        Config("cpu", "eval", "crop-resize"),
        Config("cpu", "eval", "crop-resize", {"dct_scaling": True}),
        Config("cpu", "train"),  # the default train: DCT scaling on, ROI decode
        Config("cpu", "train", options={"dct_scaling": False}),
        Config("cpu", "train", options={"roi_decode": False}),
    ]
    if dali:
        configs += [Config("dali-native", "eval"), Config("dali-native", "eval", "crop-resize"),
                    Config("dali-native", "train")]
    if nvimgcodec:  # its CPU twin: nvImageCodec's CPU decoder + the CPU resample
        configs += [Config("nvimgcodec", "eval"), Config("nvimgcodec", "train")]
    return configs


def dali_available() -> bool:
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def nvimgcodec_available() -> bool:
    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError:
        return False
    return True


def pil_rgb(payload: bytes) -> Image.Image:
    with Image.open(io.BytesIO(payload)) as image:
        image.load()
        return image.convert("RGB")


def torchvision_eval(image: Image.Image, size: int) -> np.ndarray:
    """torchvision's Resize(round(size / 0.875)) + CenterCrop(size), on a PIL image."""
    w, h = image.size
    r = int(round(size / FRACTION))
    if w <= h:
        new_w, new_h = r, int(r * h / w)
    else:
        new_h, new_w = r, int(r * w / h)
    resized = image.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    return np.asarray(resized.crop((left, top, left + size, top + size)))


def same_box(image: Image.Image, box, flip: bool, size: int) -> np.ndarray:
    """PIL's bilinear resize of `box` (top, left, height, width; fractions allowed)."""
    top, left, h, w = (float(v) for v in box)
    out = image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
    if flip:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out)


@dataclass
class Errors:
    """Per-image MAE and the largest pixel difference against one reference."""

    mae: list[float] = field(default_factory=list)
    max_diff: int = 0

    def add(self, got: np.ndarray, want: np.ndarray) -> None:
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        self.mae.append(float(diff.mean()))
        self.max_diff = max(self.max_diff, int(diff.max()))

    def summary(self) -> dict | None:
        if not self.mae:
            return None
        mae = np.asarray(self.mae)
        return {"median_mae": float(np.median(mae)), "p99_mae": float(np.percentile(mae, 99)),
                "max_abs_diff": self.max_diff, "images": int(mae.size)}


def measure(config: Config, ds, images: list[Image.Image], size: int, batch: int,
            threads: int) -> dict:
    """Run one epoch of `config` and compare every image with the references."""
    options = dict(config.options)
    if config.backend == "cpu":
        options.setdefault("threads", threads)
    elif config.backend == "dali-native":
        options.setdefault("num_threads", threads)
    elif config.backend == "nvimgcodec":
        options.setdefault("num_cpu_threads", threads)
    heights, widths = np.asarray(ds.column("height")), np.asarray(ds.column("width"))
    same, tv = Errors(), Errors()
    # the crops the Pipeline draws: its image size, mode and eval crop
    crop = CropConfig((size, size), mode=config.augment, eval_crop=config.eval_crop)
    image = ImageOptions(size=size, backend=config.backend, backend_options=options,
                         dtype="uint8", layout="NHWC", eval_crop=config.eval_crop)
    with Pipeline(ds, batch, fields={"image": image}, augment=config.augment, device="cpu",
                  drop_last=False, rank=0, world_size=1, seed=0) as pipe:
        pipe.set_epoch(0)
        for out in pipe:
            ids = out["index"].numpy()
            pixels = out["image"].numpy()
            boxes, flips = crop_boxes(0, 0, ids, heights[ids], widths[ids], crop)
            for k, i in enumerate(ids):
                same.add(pixels[k], same_box(images[i], boxes[k], bool(flips[k]), size))
                if config.augment == "eval":
                    tv.add(pixels[k], torchvision_eval(images[i], size))
            if pipe.stats.decode_errors:
                raise SystemExit(f"{config.name}: {pipe.stats.decode_errors} images failed")
    return {"config": config.name, "backend": config.backend, "augment": config.augment,
            "eval_crop": config.eval_crop if config.augment == "eval" else None,
            "options": config.options, "same_box": same.summary(),
            "torchvision_eval": tv.summary()}


def _cells(summary: dict | None) -> str:
    if summary is None:
        return "- | - | -"
    return (f"{summary['median_mae']:.3f} | {summary['p99_mae']:.3f} | "
            f"{summary['max_abs_diff']}")


def table(results: list[dict], size: int, count: int) -> str:
    lines = [f"{count} images, {size}x{size}, uint8 NHWC; MAE per image in 0-255 units",
             "",
             "| configuration | same box: median MAE | p99 MAE | max abs diff "
             "| torchvision eval: median MAE | p99 MAE | max abs diff |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['config']} | {_cells(r['same_box'])} | "
                     f"{_cells(r['torchvision_eval'])} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES,
                        help="folder of JPEGs (any depth)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[224],
                        help="output sizes S, one table each (default 224)")
    parser.add_argument("--limit", type=int, default=None, help="use the first N images")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-dali", action="store_true", help="skip dali-native (CPU mode)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    files = jpeg_files(args.images)[:args.limit]
    configs = configurations(dali=not args.no_dali and dali_available(),
                             nvimgcodec=nvimgcodec_available())
    with tempfile.TemporaryDirectory() as tmp:
        ds = open_dataset(write_jpeg_dataset(files, Path(tmp) / "fidelity.chute"))
        images = [pil_rgb(ds[i]["image"].tobytes()) for i in range(len(ds))]
        results = {}
        for size in args.sizes:
            results[size] = []
            for config in configs:
                print(f"measuring {config.name} at {size} ...", file=sys.stderr, flush=True)
                results[size].append(measure(config, ds, images, size, args.batch,
                                             args.threads))
    if args.json:
        print(json.dumps({"images": len(files), "results": {str(s): r
                                                             for s, r in results.items()}}))
    else:
        print("\n\n".join(table(r, s, len(files)) for s, r in results.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
