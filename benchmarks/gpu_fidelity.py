"""Fidelity of the GPU image backends against chute's `cpu` backend, on real JPEGs.

    python benchmarks/gpu_fidelity.py DATASET_OR_JPEG_FOLDER [--size 224] [--batch-size 16]
                                      [--json FILE] [--cpu-mode]

Each backend (`nvimgcodec`, `dali`, `dali-native`) delivers one eval and one train epoch on CUDA
device 0, uint8 NHWC at SIZE x SIZE, with the seed and crops of a `cpu` epoch on the CPU; every
image is compared with the `cpu` backend's. The table gives, in 0-255 units, the median and 99th
percentile over images of the per-image mean absolute difference and the largest difference of
any pixel, and whether both replaced the same samples (an image one decoder refuses and the
other decodes). Status "ok" when the median is within the tests' tolerance (1.0).

--cpu-mode (no GPU): the CPU twin of `nvimgcodec` and `dali-native` in DALI's CPU-only mode;
`dali` needs a GPU. A backend whose library is missing is a row saying "not installed".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from _datasets import jpeg_files, write_jpeg_dataset
from bench_gpu import missing

from chute.pipelines import ImageOptions, Pipeline
from chute.readers import open_dataset

TOLERANCE = 1.0  # mean |difference| per image, as tests/gpu/test_dali_gpu.py


def epoch(dataset, backend: str, device: str, augment: str, size: int, batch: int):
    """(index, uint8 NHWC images) of one epoch, on the host."""
    image = ImageOptions(size=size, backend=backend, dtype="uint8", layout="NHWC")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # substitutions are reported in the table
        with Pipeline(dataset, batch, fields={"image": image}, augment=augment, device=device,
                      seed=0, drop_last=False) as pipe:
            batches = [(b["index"].cpu().numpy(), b["image"].cpu().numpy()) for b in pipe]
    return (np.concatenate([i for i, _ in batches]), np.concatenate([x for _, x in batches]))


def compare(dataset, backend: str, device: str, augment: str, size: int, batch: int) -> dict:
    ids, want = epoch(dataset, "cpu", "cpu", augment, size, batch)
    got_ids, got = epoch(dataset, backend, device, augment, size, batch)
    same = ids == got_ids
    diff = np.abs(want[same].astype(np.int16) - got[same].astype(np.int16))
    mae = diff.reshape(len(diff), -1).mean(axis=1)
    row = {"images": int(same.sum()), "median_mae": float(np.median(mae)),
           "p99_mae": float(np.percentile(mae, 99)), "max_abs_diff": int(diff.max()),
           "same_substitutes": bool(same.all())}
    row["status"] = "ok" if row["median_mae"] <= TOLERANCE and same.all() else "CHECK"
    return row


def backends(cpu_mode: bool) -> list[tuple[str, str | None]]:
    """(backend, what is missing or None) in table order."""
    cuda = () if cpu_mode else ("cupy",)
    return [("nvimgcodec", missing("nvidia.nvimgcodec", *cuda)),
            ("dali", "needs a GPU" if cpu_mode else missing("nvidia.dali", "cupy")),
            ("dali-native", missing("nvidia.dali"))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="chute dataset or folder of JPEG files")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cpu-mode", action="store_true", help="no GPU: the CPU twins")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)

    from chute._device import cuda_device_count

    if not args.cpu_mode and cuda_device_count() == 0:
        print("no CUDA device: nothing to compare (--cpu-mode compares the CPU twins)")
        return 0
    device = "cpu" if args.cpu_mode else "cuda"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = args.data
        if not (path / "chute.json").exists():
            path = write_jpeg_dataset(jpeg_files(path), Path(tmp) / "fidelity.chute")
        dataset = open_dataset(path)
        print(f"{len(dataset)} JPEGs, {args.size}x{args.size} uint8 NHWC, against backend "
              f"'cpu'; MAE per image in 0-255 units ({device})")
        print(f"{'backend':<24}{'median MAE':>11}{'p99 MAE':>9}{'max':>5}  status")
        for backend, absent in backends(args.cpu_mode):
            for augment in ("eval", "train"):
                label = f"{backend} {augment}"
                if absent is not None:
                    row = {"status": absent}
                else:
                    try:
                        row = compare(dataset, backend, device, augment, args.size,
                                      args.batch_size)
                    except Exception as exc:  # report it, measure the others
                        row = {"status": f"FAILED: {type(exc).__name__}: "
                                         f"{str(exc).splitlines()[0][:100]}"}
                rows.append({"backend": backend, "augment": augment, **row})
                if "median_mae" in row:
                    subs = "" if row["same_substitutes"] else ", substitutes differ"
                    print(f"{label:<24}{row['median_mae']:>11.3f}{row['p99_mae']:>9.3f}"
                          f"{row['max_abs_diff']:>5}  {row['status']}{subs}")
                else:
                    print(f"{label:<24}{'-':>11}{'-':>9}{'-':>5}  {row['status']}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
