"""`chute bench DATASET`: stream a dataset through a Pipeline and print images/s per epoch.

The first epoch is reported separately: it pays for JIT compilation and a cold page cache.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from chute._cli._args import EVAL_CROPS, image_size, positive
from chute._cli._output import add_json_flag, print_json
from chute.errors import ChuteError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="measure Pipeline throughput (samples/s) on a dataset",
        description="Iterate a Pipeline over DATASET for a few epochs and print images/s (or "
        "samples/s without an image field) per epoch; the first epoch (JIT compilation, cold "
        "cache) is reported separately.")
    parser.add_argument("dataset", metavar="DATASET", help="chute dataset folder or zarr group")
    parser.add_argument("--batch-size", type=positive(int), default=128, help="(default: 128)")
    parser.add_argument("--image-size", type=image_size, default=224,
                        help="output size, S or HxW (default: 224)")
    parser.add_argument("--augment", choices=("train", "eval"), default="train",
                        help="train: random-resized-crop + flip; eval: center crop "
                        "(default: train)")
    parser.add_argument("--eval-crop", choices=EVAL_CROPS, default=EVAL_CROPS[0],
                        help="how eval crops are made (default: torchvision, Resize + "
                        "CenterCrop; crop-resize: FFCV's)")
    parser.add_argument("--backend", default="auto",
                        help="image backend: auto, cpu, dali, dali-native or nvimgcodec "
                        "(default: auto)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32", "uint8"),
                        default="float16",
                        help="(default: float16)")
    parser.add_argument("--epochs", type=positive(int), default=3, help="(default: 3)")
    parser.add_argument("--threads", type=positive(int), default=None,
                        help="decoder threads of the cpu backend (default: all cores)")
    parser.add_argument("--fields", nargs="+", metavar="FIELD", default=None,
                        help="fields to deliver (default: the Pipeline's default)")
    parser.add_argument("--lookup", action="append", default=[], metavar="TABLE=INDEX",
                        type=_lookup, help="deliver table TABLE per sample through index field "
                        "INDEX (repeatable; e.g. clip_emb=segment_to_video)")
    parser.add_argument("--sample-array", default=None, metavar="ARRAY",
                        help="zarr groups whose arrays' first dimensions differ: the array "
                        "whose rows are the samples")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _lookup(text: str) -> tuple[str, str]:
    table, sep, index = text.partition("=")
    if not sep or not table or not index:
        raise argparse.ArgumentTypeError(f"--lookup needs TABLE=INDEX, got {text!r}")
    return table, index


def run(args) -> int:
    from chute import ImageOptions  # with the autotuner registered for --backend auto
    from chute._cli._fields import opened

    options = {"threads": args.threads} if args.threads else None
    image = ImageOptions(size=args.image_size, backend=args.backend, backend_options=options,
                         dtype=args.dtype, eval_crop=args.eval_crop)
    # with --json, the human-readable lines go to stderr and stdout holds one JSON object
    out = sys.stderr if args.json else sys.stdout
    zarr = {"sample_array": args.sample_array} if args.sample_array else {}
    with opened(args.dataset, **zarr) as dataset:
        if args.augment == "train" and args.batch_size > len(dataset):
            # train drops the incomplete tail: not one batch would be measured
            raise ChuteError(f"{args.dataset}: --batch-size {args.batch_size} is more than its "
                             f"{len(dataset)} samples, so train gives no full batch; use "
                             f"--batch-size {len(dataset)} or less (or --augment eval)")
        return _bench(args, dataset, image, out)


def _bench(args, dataset, image, out) -> int:
    from tqdm import tqdm

    from chute._cli._fields import build_pipeline, pipeline_fields
    from chute.pipelines import image_size_of

    with build_pipeline(
            dataset, args.batch_size, augment=args.augment, device=args.device, rank=0,
            world_size=1, fields=pipeline_fields(dataset, args.fields, image,
                                                 dict(args.lookup))) as pipe:
        # --image-size and --dtype shape image fields only: without one (latents, video,
        # audio) the header names the fields measured and the rates count samples
        images = bool(pipe.stats.backend)
        shape = (f"{args.image_size}px {args.dtype}" if images else
                 "fields " + ", ".join(pipe.fields))
        unit, rate_unit = ("images", "img/s") if images else ("samples", "samples/s")
        print(f"chute bench: {args.dataset}: {len(pipe.dataset)} samples, backend "
              f"{pipe.stats.backend or 'none (no image field)'}, device {pipe.device}, "
              f"batch {args.batch_size}, {shape} {args.augment}", file=out)
        rates, cpu_per_1000 = [], []
        for epoch in range(args.epochs):
            pipe.set_epoch(epoch)
            if epoch == 1:  # stage timers of the steady epochs (the first compiles, maps)
                pipe.stats.stages.reset()
            count = 0
            start, cpu = time.perf_counter(), time.process_time()
            for batch in tqdm(pipe, total=len(pipe), unit="batch", leave=False,
                              disable=args.no_progress or args.json, desc=f"epoch {epoch}"):
                count += batch["index"].shape[0]
            _synchronize(pipe.device)
            seconds = time.perf_counter() - start
            rates.append(count / seconds if seconds > 0 else float("nan"))
            # every thread of the process: decoders, workers, the loop
            cpu_per_1000.append(1000 * (time.process_time() - cpu) / max(count, 1))
            label = "first epoch (JIT, cold cache)" if epoch == 0 else f"epoch {epoch}"
            print(f"{label:30s} {count:8d} {unit} {seconds:8.2f} s {rates[-1]:10.1f} "
                  f"{rate_unit}", file=out)
        if len(rates) > 1:
            steady = statistics.median(rates[1:])
            print(f"{'steady state (median)':30s} {steady:35.1f} {rate_unit}", file=out)
        if pipe.stats.backend_reason:
            print(f"backend choice: {pipe.stats.backend_reason}", file=out)
        roi = _roi_status() if pipe.stats.backend == "cpu" else None
        if roi is not None:
            print(f"cpu backend ROI decoder: {roi}", file=out)
        steady_cpu = statistics.median(cpu_per_1000[1:] or cpu_per_1000)
        print(f"CPU core-seconds per 1,000 {unit}: {steady_cpu:.2f} "
              f"({pipe.stats.threads or 'no'} decoder threads)", file=out)
        print("stages" + (" (epochs after the first)" if args.epochs > 1 else "") + ":",
              file=out)
        for line in pipe.stats.stages.lines():
            print(f"  {line}", file=out)
        print(f"decode errors {'replaced' if pipe.augment == 'train' else 'left out'}: "
              f"{pipe.stats.decode_errors}; "
              f"time waiting for batches: {pipe.stats.wait_seconds:.2f} s", file=out)
        if args.json:
            print_json({"dataset": str(args.dataset), "backend": pipe.stats.backend,
                        "backend_options": pipe.stats.backend_options,
                        "backend_reason": pipe.stats.backend_reason, "device": str(pipe.device),
                        "batch_size": args.batch_size,
                        "image_size": image_size_of(args.image_size) if pipe.stats.backend
                        else None,
                        "dtype": args.dtype, "augment": args.augment,
                        "images_per_second": rates,
                        "steady_images_per_second": (statistics.median(rates[1:])
                                                     if len(rates) > 1 else None),
                        "decode_errors": pipe.stats.decode_errors,
                        "wait_seconds": pipe.stats.wait_seconds,
                        "cpu_seconds_per_1000": cpu_per_1000,
                        "threads": pipe.stats.threads, "roi_decoder": roi,
                        **pipe.stats.stages.as_dict()})
    return 0


def _roi_status() -> str:
    """"built (PATH)" or "unavailable: WHY" of the cpu backend's ROI JPEG decoder."""
    from chute.fallbacks import roi_decoder_status

    status = roi_decoder_status()
    return (f"built ({status.library})" if status.available
            else f"unavailable: {status.reason} (whole frames are decoded)")


def _synchronize(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
