"""End-to-end Pipeline (cpu backend) vs the bare CPU batch decoder on the same images.

Both decode exactly the same batches (the Pipeline's plan: same ids, RandomResizedCrop boxes and
flips, 224 px, float16 NCHW) with the same decoder threads, alternating epochs in one run. The
ratio (Pipeline img/s / bare decoder img/s) measures what order, gathering, prefetch, slots and
tensor wrapping cost on top of decoding. Target: >= 0.95.

    .venv/bin/python benchmarks/bench_pipeline.py [--images DIR] [--threads 2] [--epochs 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _datasets import jpeg_files, machine_line, write_jpeg_dataset

from chute.fallbacks import decode_batch
from chute.pipelines import ImageOptions, Pipeline
from chute.readers import open_dataset

DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared/data/imagenet-sample/images"


def bare_epoch(ds, plan, out, threads) -> int:
    """Decode every batch of `plan` with decode_batch alone; the number of images."""
    images = 0
    for it in range(len(plan)):
        request = plan.request(it)
        data, offsets = ds.gather(request.ids)
        decode_batch(data, offsets, request.params["boxes"], request.params["flips"],
                     out[: len(request)], layout="NCHW", threads=threads)
        images += len(request)
    return images


def pipeline_epoch(pipe) -> int:
    return sum(batch["image"].shape[0] for batch in pipe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_jpeg_dataset(jpeg_files(args.images), Path(tmp) / "sample.chute")
        ds = open_dataset(path)
        image = ImageOptions(size=224, backend="cpu", backend_options={"threads": args.threads},
                             dtype="float16")
        pipe = Pipeline(ds, args.batch_size, fields={"image": image, "label": None},
                        augment="train", device="cpu", rank=0, world_size=1)
        out = np.empty((args.batch_size, 3, 224, 224), np.float16)
        pipe.set_epoch(0)
        bare_epoch(ds, pipe.plan(), out, args.threads)  # JIT + page cache warm-up
        pipeline_epoch(pipe)
        bare_t, pipe_t, bare_n, pipe_n = 0.0, 0.0, 0, 0
        for epoch in range(1, args.epochs + 1):
            pipe.set_epoch(epoch)
            t0 = time.perf_counter()
            bare_n += bare_epoch(ds, pipe.plan(), out, args.threads)
            t1 = time.perf_counter()
            pipe_n += pipeline_epoch(pipe)
            t2 = time.perf_counter()
            bare_t, pipe_t = bare_t + t1 - t0, pipe_t + t2 - t1
        pipe.close()
    bare_rate, pipe_rate = bare_n / bare_t, pipe_n / pipe_t
    print(f"images {len(ds)}, batch {args.batch_size}, RRC 224 float16 NCHW, "
          f"threads {args.threads}, epochs {args.epochs}")
    print(machine_line())
    print(f"bare decode_batch   {bare_rate:8.1f} img/s")
    print(f"Pipeline (cpu)      {pipe_rate:8.1f} img/s")
    print(f"ratio               {pipe_rate / bare_rate:8.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main()
