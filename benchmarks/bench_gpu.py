"""GPU path side by side: chute `cpu`, `nvimgcodec`, `dali` and `dali-native`, DALI's own
random-crop pipeline and torchvision's GPU JPEG decoder, RandomResizedCrop to 224 and 64, float16
NCHW, one run, img/s as ratios to chute `cpu` and to torchvision, + GPU utilisation.

    python benchmarks/bench_gpu.py DATASET_OR_JPEG_FOLDER [--batch-size 256] [--sizes 224 64]
                                   [--batches 40] [--warmup 5] [--hw-decoder-load 0.65]
                                   [--json FILE]
    python benchmarks/bench_gpu.py DATASET_OR_JPEG_FOLDER --cpu-mode   # no GPU needed
    python benchmarks/bench_gpu.py DATASET_OR_JPEG_FOLDER --views      # DINO multi-crop

A folder of JPEGs is first written to a temporary chute dataset. Every contender gets the same
images, batch size and output size; the DALI reference uses fn.decoders.image_random_crop (its own
RRC sampling, so not the same crops) + fn.resize + fn.crop_mirror_normalize; torchvision decodes
each batch with one `torchvision.io.decode_jpeg(list, device="cuda")` call (nvJPEG, batched), then
`transforms.v2` RandomResizedCrop + RandomHorizontalFlip + Normalize per image on the GPU. GPU
utilisation is the mean of the samples chute.autotune.GpuSampler takes (pynvml, every 50 ms, in
a thread) while the contender runs. A contender whose library is missing is a row saying
"not installed"; one that fails is a row saying so, and the others still run.

--views measures DINO multi-crop instead of one crop (2 views at 224, scale (0.32, 1), + 6 at 96,
scale (0.05, 0.32), per image; docs/views.md): chute's `views=` (one decode per image, every view
from it) on the backends that decode views (cpu, nvimgcodec, dali), against torchvision's batched
GPU decode followed by the 8 RandomResizedCrop + flip + Normalize views per image; the rates
count images (of 8 views each).

On a machine without a CUDA device, and without --cpu-mode, it prints "no CUDA device: nothing to
measure" and exits with status 0 (there is nothing wrong, there is just nothing to measure).
--cpu-mode compares on the CPU: `dali-native` in DALI's CPU-only mode, the CPU twin of
`nvimgcodec`, DALI's own random-crop pipeline in CPU-only mode, torchvision's CPU decoder and
chute `cpu`, outputs on the host.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _datasets import DINO_VIEWS, jpeg_files, machine_line, write_jpeg_dataset

from chute.autotune import GpuSampler


def ensure_dataset(path: Path, workdir: Path) -> Path:
    """`path` if it is a chute dataset, else a dataset written from the JPEGs under `path`."""
    if (path / "chute.json").exists():
        return path
    # DALI and chute both decode RGB JPEGs; CMYK and greyscale ones are left out here.
    return write_jpeg_dataset(jpeg_files(path), workdir / "bench.chute", rgb_only=True)


def utilisation(sampler: GpuSampler) -> str:
    """The sampled mean SM utilisation and, where the driver reports it, the JPEG engines'
    ("n/a" where nothing could be sampled): SM use alone says nothing of a hardware decode."""
    if sampler.mean is None:
        return "n/a"
    jpeg = sampler.engine_mean("jpeg")
    return f"{sampler.mean:.0f}%" + ("" if jpeg is None else f", JPEG engines {jpeg:.0f}%")


def time_batches(batches, count: int, warmup: int, sync) -> tuple[float, int]:
    """(seconds, images) over `count` batches after `warmup` untimed ones."""
    it = iter(batches)
    for _ in range(warmup):
        next(it)
    sync()
    images, start = 0, time.perf_counter()
    for _ in range(count):
        images += next(it)
    sync()
    return time.perf_counter() - start, images


def chute_batches(dataset, backend: str, device: str, size: int | None, args):
    from chute import ImageOptions, Pipeline

    options = {"hw_decoder_load": args.hw_decoder_load} if backend == "dali" else None
    if args.views:
        image = ImageOptions(views=DINO_VIEWS, backend=backend, backend_options=options,
                             dtype="float16")
    else:
        image = ImageOptions(size=size, backend=backend, backend_options=options,
                             dtype="float16")
    fields = {"image": image}
    if "label" in dataset.fields:  # the Pipeline's default fields: image and label
        fields["label"] = None
    pipe = Pipeline(dataset, args.batch_size, fields=fields, device=device)
    try:
        for epoch in range(1 << 30):
            pipe.set_epoch(epoch)
            for batch in pipe:
                yield len(batch["index"])
    finally:
        pipe.close()


def dali_reference_batches(dataset, device_id, size: int, args):
    """DALI's own pipeline: same bytes (our external source), its own random-crop ROI decode."""
    from chute.pipelines import BatchPlan, CropConfig, CropParams
    from chute.pipelines.producers._dali._graph import import_dali
    from chute.pipelines.producers.image._dali_source import DaliBatchSource
    from chute.readers import DatasetRef

    dali = import_dali()
    fn, types = dali.fn, dali.types
    mixed = device_id is not None
    crops = CropParams(CropConfig((size, size)), np.asarray(dataset.column("height")),
                       np.asarray(dataset.column("width")))
    plan = BatchPlan(DatasetRef.of(dataset), len(dataset), seed=0, epoch=0, rank=0,
                     world_size=1, batch_size=args.batch_size, drop_last=True,
                     start_position=0, params=(crops,))

    source = EncodedOnly(DaliBatchSource(plan))

    @dali.pipeline_def(batch_size=args.batch_size, num_threads=args.dali_threads,
                       device_id=device_id, prefetch_queue_depth=2)
    def graph():
        encoded = fn.external_source(source=source, batch=True, batch_info=True)
        extra = {"hw_decoder_load": args.hw_decoder_load} if mixed else {}
        images = fn.decoders.image_random_crop(
            encoded, device="mixed" if mixed else "cpu", output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10,
            **extra)
        images = fn.resize(images, resize_x=size, resize_y=size, antialias=True,
                           interp_type=types.INTERP_LINEAR)
        return fn.crop_mirror_normalize(
            images, dtype=types.FLOAT16, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], std=[0.229 * 255, 0.224 * 255,
                                                               0.225 * 255])

    pipe = graph()
    pipe.build()
    while True:
        try:
            (images,) = pipe.run()
        except StopIteration:
            pipe.reset()
            continue
        yield len(images)


class EncodedOnly:
    """Only the encoded bytes of a DaliBatchSource batch (DALI draws its own crops)."""

    def __init__(self, source):
        self.source = source

    def __call__(self, batch_info):
        return self.source(batch_info)[0]


def torchvision_batches(dataset, device: str, size: int | None, args):
    """torchvision's own path: one batched decode_jpeg per batch, then transforms.v2 per image
    (per view of each image with --views)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms import v2

    def transform(size: int | tuple[int, int], scale: tuple[float, float]):
        return v2.Compose([
            v2.RandomResizedCrop(size, scale=scale, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    if args.views:  # View.size is (H, W), as RandomResizedCrop takes it
        transforms = [transform(v.size, v.scale) for v in DINO_VIEWS for _ in range(v.count)]
    else:
        transforms = [transform(size, (0.08, 1.0))]
    rng = np.random.default_rng(0)
    batch = min(args.batch_size, len(dataset))
    while True:
        order = rng.permutation(len(dataset))
        for start in range(0, len(order) - batch + 1, batch):
            views = dataset.views(order[start:start + batch], field="image")
            encoded = [torch.from_numpy(np.array(v, dtype=np.uint8)) for v in views]
            images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
            outs = [torch.stack([t(image) for image in images]).to(torch.float16)
                    for t in transforms]
            yield int(outs[0].shape[0])


def missing(*modules: str) -> str | None:
    """None when every module imports, else what to report instead of a measurement."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            return f"not installed ({name})"
        except Exception as exc:  # a library that is there but cannot load (no driver, ...)
            return f"cannot load {name}: {str(exc).splitlines()[0][:80]}"
    return None


def contenders(cpu_mode: bool, views: bool = False):
    """(label, what is missing or None, factory(dataset, size, args)) in table order; the
    first is the reference of the ratios. With `views`, only those that make multi-crop views
    (dali-native and DALI's own pipeline make one crop per decode)."""
    device = "cpu" if cpu_mode else "cuda"
    device_id = None if cpu_mode else 0
    cuda_only = ("cupy",) if not cpu_mode else ()
    rows = [
        ("chute cpu", None, lambda ds, s, a: chute_batches(ds, "cpu", device, s, a)),
        ("chute nvimgcodec" + (" (CPU twin)" if cpu_mode else ""),
         missing("nvidia.nvimgcodec", *cuda_only),
         lambda ds, s, a: chute_batches(ds, "nvimgcodec", device, s, a)),
    ]
    if not cpu_mode:  # its kernel needs a GPU
        rows.append(("chute dali", missing("nvidia.dali", "cupy"),
                     lambda ds, s, a: chute_batches(ds, "dali", device, s, a)))
    if not views:
        rows += [
            ("chute dali-native" + (" (DALI CPU mode)" if cpu_mode else ""),
             missing("nvidia.dali"),
             lambda ds, s, a: chute_batches(ds, "dali-native", device, s, a)),
            ("DALI image_random_crop" + (" (CPU mode)" if cpu_mode else ""),
             missing("nvidia.dali"),
             lambda ds, s, a: dali_reference_batches(ds, device_id, s, a)),
        ]
    rows.append(("torchvision decode_jpeg + v2" + (" (CPU)" if cpu_mode else " (cuda)"),
                 missing("torchvision"), lambda ds, s, a: torchvision_batches(ds, device, s, a)))
    return rows


def measure(factory, dataset, size: int | None, args, sync) -> tuple[float | None, str, str]:
    """(img/s or None, GPU utilisation, status) of one contender."""
    batches = None
    try:
        batches = factory(dataset, size, args)
        if args.cpu_mode:
            seconds, images = time_batches(batches, args.batches, args.warmup, sync)
            return images / seconds, "n/a (CPU mode)", "ok"
        with GpuSampler("cuda:0") as sampler:
            seconds, images = time_batches(batches, args.batches, args.warmup, sync)
        return images / seconds, utilisation(sampler), "ok"
    except Exception as exc:  # one broken contender must not hide the others' numbers
        return None, "", f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    finally:
        if batches is not None:
            batches.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="chute dataset or folder of JPEG files")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 64])
    parser.add_argument("--batches", type=int, default=40, help="timed batches per contender")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hw-decoder-load", type=float, default=0.65)
    parser.add_argument("--dali-threads", type=int, default=4)
    parser.add_argument("--cpu-mode", action="store_true",
                        help="no GPU: DALI CPU-only mode vs chute cpu, outputs on the host")
    parser.add_argument("--views", action="store_true",
                        help="DINO multi-crop (2 x 224 + 6 x 96 views per image) instead of "
                             "--sizes")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)

    from chute._device import cuda_device_count

    if not args.cpu_mode and cuda_device_count() == 0:
        print("no CUDA device: nothing to measure (--cpu-mode compares DALI's CPU-only mode "
              "with chute's cpu backend)")
        return 0
    if args.cpu_mode:
        sync = lambda: None  # noqa: E731
    else:
        import torch

        sync = torch.cuda.synchronize
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        from chute.readers import open_dataset

        dataset = open_dataset(ensure_dataset(args.data, Path(tmp)))
        print(f"{len(dataset)} images, batch {args.batch_size}, {args.batches} timed batches "
              f"after {args.warmup} warm-up, float16 NCHW, "
              f"{'CPU mode' if args.cpu_mode else 'CUDA device 0'}")
        print(machine_line())
        # --views: one measurement of DINO_VIEWS (no single output size)
        for size in [None] if args.views else args.sizes:
            results = []
            for label, absent, factory in contenders(args.cpu_mode, args.views):
                if absent is not None:
                    results.append((label, None, "", absent))
                else:
                    results.append((label, *measure(factory, dataset, size, args, sync)))
            cpu_rate = results[0][1]
            tv_rate = results[-1][1]
            print("\nDINO views, 2 x 224 + 6 x 96 per image (img/s: images of 8 views)"
                  if args.views else f"\nRandomResizedCrop {size}x{size}")
            print(f"{'contender':<40}{'img/s':>10}{'vs chute cpu':>14}{'vs torchvision':>16}"
                  "  GPU utilisation / status")
            for label, rate, util, status in results:
                row = {"size": "views" if args.views else size, "contender": label,
                       "img_s": rate, "status": status, "gpu_utilisation": util or None,
                       "vs_chute_cpu": rate / cpu_rate if rate and cpu_rate else None,
                       "vs_torchvision": rate / tv_rate if rate and tv_rate else None}
                rows.append(row)
                vs_cpu = _num(row["vs_chute_cpu"], ".2f", "x")
                vs_tv = _num(row["vs_torchvision"], ".2f", "x")
                print(f"{label:<40}{_num(rate, '.0f'):>10}{vs_cpu:>14}{vs_tv:>16}  "
                      f"{util if status == 'ok' else status}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _num(value, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


if __name__ == "__main__":
    sys.exit(main())
