"""CPU decode + augment throughput, side by side in one run.

    .venv/bin/python benchmarks/bench_cpu.py [--images DIR] [--reps 5] [--batch 128]
        [--threads N] [--only a,b,...] [--ffcv-python /tmp/ffcv-venv/bin/python]

Configurations (all on the same images, the same number of threads):
  (a) bound: libjpeg-turbo full-size decode only, through the same jitted TurboJPEG calls;
  (b) chute train RandomResizedCrop 224 -> float16 NCHW normalized, decoding only each crop's
  region (the default), and for comparison decoding full frames; (c) the same at 128 and 64;
  (d) chute eval 224 (torchvision's Resize + CenterCrop box, no DCT scaling); (e) PIL +
  torchvision-style RandomResizedCrop in a torch DataLoader
  with one worker per thread; (f) DALI CPU-only (device_id=None) image_random_crop + resize
  (antialias) + crop_mirror_normalize to float16; (g) FFCV 1.0.2 (run by --ffcv-python, a
  separate environment) on q90 re-encodes of the images, next to the bound and chute on the
  same q90 images. Every configuration makes one warm-up pass over all images, then all are
  timed round-robin for --reps rounds (so machine drift hits them alike); the table gives the
  median and min-max in images per second and the ratio of the median to the bound's median.
  Re-encoded images live in a temporary directory.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from _datasets import machine_line
from numba import get_thread_id, njit, prange
from PIL import Image

from chute.fallbacks import IMAGENET_MEAN, IMAGENET_STD, decode_batch
from chute.fallbacks import _turbojpeg as tj
from chute.pipelines.producers.image._crops import CropConfig, crop_boxes

DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared/data/imagenet-sample/images"


# ----------------------------------------------------------------------------- inputs
class Images:
    """Encoded images in memory, laid out as Dataset.gather returns them."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        payloads = [p.read_bytes() for p in paths]
        self.data = np.frombuffer(b"".join(payloads), dtype=np.uint8)
        self.offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum([len(p) for p in payloads])
        sizes = [Image.open(io.BytesIO(p)).size for p in payloads]
        self.widths = np.array([w for w, _ in sizes], dtype=np.int64)
        self.heights = np.array([h for _, h in sizes], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def batch(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[start], self.offsets[stop]
        return self.data[lo:hi], self.offsets[start:stop + 1] - lo


def reencode_q90(paths: list[Path], directory: Path) -> list[Path]:
    out = []
    for p in paths:
        target = directory / (p.stem + ".jpg")
        with Image.open(p) as im:
            im.convert("RGB").save(target, "JPEG", quality=90)
        out.append(target)
    return out


# ----------------------------------------------------------------------------- runners
@njit(parallel=True, nogil=True)
def _decode_only(data, offsets, widths, heights, handles, scratch):
    base = data.ctypes.data
    for i in prange(len(offsets) - 1):
        t = get_thread_id()
        tj.tj_decompress2(handles[t], base + offsets[i], offsets[i + 1] - offsets[i],
                          scratch[t].ctypes.data, widths[i], 0, heights[i], tj.TJPF_RGB, 0)


def bound_runner(images: Images, batch: int):
    lib = tj.load()
    threads = numba.config.NUMBA_NUM_THREADS
    handles = tj.create_handles(lib, threads)
    scratch = np.empty((threads, int((images.widths * images.heights).max()) * 3), np.uint8)

    def run():
        for start in range(0, len(images), batch):
            stop = min(start + batch, len(images))
            data, offsets = images.batch(start, stop)
            with numba.parallel_chunksize(1):  # same scheduling as chute
                _decode_only(data, offsets, images.widths[start:stop],
                             images.heights[start:stop], handles, scratch)
    return run


def chute_runner(images: Images, batch: int, size: int, mode: str, roi_decode=None):
    config = CropConfig((size, size), mode=mode)
    out = np.empty((batch, 3, size, size), np.float16)
    epoch = [0]

    def run():
        epoch[0] += 1
        for start in range(0, len(images), batch):
            stop = min(start + batch, len(images))
            ids = np.arange(start, stop)
            boxes, flips = crop_boxes(0, epoch[0], ids, images.heights[start:stop],
                                      images.widths[start:stop], config)
            data, offsets = images.batch(start, stop)
            # DCT-domain scaling as the Pipeline defaults it: on in train, off in eval.
            status = decode_batch(data, offsets, boxes, flips, out[:stop - start],
                                  roi_decode=roi_decode, dct_scaling=mode == "train")
            if status.any():
                raise RuntimeError(f"chute failed on {int((status != 0).sum())} images")
    return run


class _PilRandomResizedCrop:
    """torchvision RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize."""

    def __init__(self, paths, size):
        self.paths = paths
        self.size = size
        self.mean = np.array(IMAGENET_MEAN, np.float32).reshape(3, 1, 1)
        self.std = np.array(IMAGENET_STD, np.float32).reshape(3, 1, 1)

    def __len__(self):
        return len(self.paths)

    def _params(self, width, height):
        area = width * height
        log_ratio = (math.log(3 / 4), math.log(4 / 3))
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            aspect = math.exp(random.uniform(*log_ratio))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        side = min(width, height)
        return (height - side) // 2, (width - side) // 2, side, side

    def __getitem__(self, index):
        import torch

        with Image.open(self.paths[index]) as im:
            im = im.convert("RGB")
            top, left, h, w = self._params(*im.size)
            im = im.resize((self.size, self.size), Image.BILINEAR,
                           box=(left, top, left + w, top + h))
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        chw = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((chw - self.mean) / self.std)


def pil_runner(images: Images, batch: int, threads: int):
    import torch

    loader = torch.utils.data.DataLoader(
        _PilRandomResizedCrop(images.paths, 224), batch_size=batch, num_workers=threads,
        persistent_workers=True, shuffle=True, prefetch_factor=2)

    def run():
        for _ in loader:
            pass
    return run


def dali_runner(images: Images, batch: int, threads: int):
    from nvidia.dali import fn, pipeline_def, types

    payloads = [images.data[images.offsets[i]:images.offsets[i + 1]] for i in range(len(images))]
    cursor = [0]

    def source():
        start = cursor[0]
        cursor[0] = (start + batch) % len(payloads)
        return [payloads[(start + k) % len(payloads)] for k in range(batch)]

    # Synchronous execution: no batch is prepared ahead in the background while another
    # configuration is being timed (every contender here is timed doing its own work only).
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=0,
                  exec_async=False, exec_pipelined=False)
    def pipeline():
        jpegs = fn.external_source(source=source, dtype=types.UINT8)
        crops = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                              random_area=[0.08, 1.0],
                                              random_aspect_ratio=[3 / 4, 4 / 3],
                                              num_attempts=10)
        resized = fn.resize(crops, resize_x=224, resize_y=224, antialias=True,
                            interp_type=types.INTERP_LINEAR)
        return fn.crop_mirror_normalize(resized, dtype=types.FLOAT16, output_layout="CHW",
                                        mean=[255 * m for m in IMAGENET_MEAN],
                                        std=[255 * s for s in IMAGENET_STD],
                                        mirror=fn.random.coin_flip(probability=0.5))

    pipe = pipeline()
    pipe.build()
    batches = math.ceil(len(images) / batch)

    def run():
        for _ in range(batches):
            pipe.run()
    return run, batches * batch


# FFCV's CPU order: NormalizeImage works on numpy arrays, so it must come before ToTensor.
# (The GPU order, normalising after ToTorchImage, makes FFCV 1.0.2's Loader constructor loop
# forever in Graph.group_operations on a CPU pipeline: FFCV issues #396 and #350.)
_FFCV_SCRIPT = r"""
import sys, time, json, numpy as np, torch
from pathlib import Path
from PIL import Image
from ffcv.writer import DatasetWriter
from ffcv.fields import RGBImageField, IntField
from ffcv.loader import Loader, OrderOption
from ffcv.fields.decoders import RandomResizedCropRGBImageDecoder, IntDecoder
from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage, NormalizeImage
folder, beton = sys.argv[1], sys.argv[2]
batch, threads, reps = (int(v) for v in sys.argv[3:6])
paths = sorted(Path(folder).glob("*.jpg"))
class Data:
    def __len__(self): return len(paths)
    def __getitem__(self, i): return Image.open(paths[i]).convert("RGB"), 0
DatasetWriter(beton, {"image": RGBImageField(write_mode="jpg", jpeg_quality=90),
                      "label": IntField()}, num_workers=threads).from_indexed_dataset(Data())
mean = np.array([0.485, 0.456, 0.406]) * 255; std = np.array([0.229, 0.224, 0.225]) * 255
loader = Loader(beton, batch_size=batch, num_workers=threads, order=OrderOption.RANDOM,
                drop_last=False, pipelines={
    "image": [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip(),
              NormalizeImage(mean, std, np.float16), ToTensor(), ToTorchImage()],
    "label": [IntDecoder()]})
for _ in loader: pass
rates = []
for _ in range(reps):
    t = time.perf_counter()
    for _ in loader: pass
    rates.append(len(paths) / (time.perf_counter() - t))
print("RATES", json.dumps(rates))
"""


def run_ffcv(python: str, folder: Path, batch: int, threads: int, reps: int,
             timeout: int):
    """(rates, None) or (None, reason)."""
    if not python or not Path(python).exists():
        return None, f"not built: no FFCV environment at {python!r} (see --ffcv-python)"
    script = folder / "ffcv_bench.py"
    script.write_text(_FFCV_SCRIPT)
    try:
        proc = subprocess.run([python, str(script), str(folder), str(folder / "q90.beton"),
                               str(batch), str(threads), str(reps)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"failed: no result within {timeout} s (FFCV Loader did not finish)"
    for line in proc.stdout.splitlines():
        if line.startswith("RATES "):
            import json

            return json.loads(line[6:]), None
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return None, f"failed: {tail[0][:200]}"


# ----------------------------------------------------------------------------- timing
def measure_interleaved(runners: list[tuple[str, object, int]], reps: int) -> dict:
    """Warm every runner up once, then time them round-robin, `reps` rounds.

    Interleaving spreads the drift of a shared machine (frequency, neighbours) evenly over
    the configurations instead of charging it to whichever ran during a slow minute."""
    for _, run, _ in runners:
        run()  # warm-up: compilation, caches, worker start-up
    rates = {name: [] for name, _, _ in runners}
    for _ in range(reps):
        for name, run, count in runners:
            start = time.perf_counter()
            run()
            rates[name].append(count / (time.perf_counter() - start))
    return rates


def table(rows, bound_for) -> str:
    lines = ["| configuration | img/s (median) | min - max | x bound |", "|---|---:|---:|---:|"]
    for name, rates, note in rows:
        if rates is None:
            lines.append(f"| {name} | - | - | {note} |")
            continue
        med = float(np.median(rates))
        bound = bound_for(name)
        ratio = f"{med / bound:.2f}" if bound else "-"
        lines.append(f"| {name} | {med:,.0f} | {min(rates):,.0f} - {max(rates):,.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--only", default="a,b,c,d,e,f,g")
    parser.add_argument("--ffcv-python", default="/tmp/ffcv-venv/bin/python")
    parser.add_argument("--ffcv-timeout", type=int, default=600)
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    paths = sorted(p for p in args.images.iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
    if not paths:
        print(f"no JPEG images in {args.images}", file=sys.stderr)
        return 2
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    images = Images(paths)
    n, b, reps, threads = len(images), args.batch, args.reps, args.threads
    print(f"{n} images from {args.images}, batch {b}, {threads} threads, {reps} reps, "
          f"Numba layer after first run shown below", flush=True)
    print(machine_line(), flush=True)
    runners, failed = [], []

    def add(name, make, count=n):
        try:
            made = make()
            run, count = made if isinstance(made, tuple) else (made, count)
            runners.append((name, run, count))
        except Exception as exc:  # a missing optional stack is reported, not fatal
            failed.append((name, None, f"failed: {type(exc).__name__}: {exc}"[:160]))

    with tempfile.TemporaryDirectory(prefix="chute-q90-") as tmp:
        if "a" in only:
            add("(a) bound: decode only", lambda: bound_runner(images, b))
        if "b" in only:
            add("(b) chute RRC 224 fp16 NCHW", lambda: chute_runner(images, b, 224, "train"))
            add("(b) same, full-frame decode", lambda: chute_runner(images, b, 224, "train",
                                                                     roi_decode=False))
        if "c" in only:
            add("(c) chute RRC 128", lambda: chute_runner(images, b, 128, "train"))
            add("(c) chute RRC 64", lambda: chute_runner(images, b, 64, "train"))
        if "d" in only:
            add("(d) chute eval 224", lambda: chute_runner(images, b, 224, "eval"))
        if "e" in only:
            add(f"(e) PIL + torch DataLoader ({threads} workers)",
                lambda: pil_runner(images, b, threads))
        if "f" in only:
            add("(f) DALI CPU", lambda: dali_runner(images, b, threads))
        if "g" in only:
            q90 = Images(reencode_q90(paths, Path(tmp)))
            add("(g) q90: bound", lambda: bound_runner(q90, b))
            add("(g) q90: chute RRC 224", lambda: chute_runner(q90, b, 224, "train"))
        print(f"  timing {len(runners)} configurations round-robin ...", flush=True)
        rates = measure_interleaved(runners, reps)
        rows = [(name, rates[name], "") for name, _, _ in runners] + failed
        if "g" in only:  # FFCV runs in its own environment, after the others
            print("  running (g) FFCV ...", flush=True)
            ffcv_rates, why = run_ffcv(args.ffcv_python, Path(tmp), b, threads, reps,
                                       args.ffcv_timeout)
            rows.append(("(g) q90: FFCV 1.0.2 RRC 224", ffcv_rates, why or ""))
    print(f"\nNumba threading layer: {numba.threading_layer()}\n")

    def bound_for(name):
        key = "(g) q90: bound" if name.startswith("(g)") else "(a) bound: decode only"
        for row_name, rates, _ in rows:
            if row_name == key and rates:
                return float(np.median(rates))
        return None

    print(table(rows, bound_for))
    return 0


if __name__ == "__main__":
    sys.exit(main())
