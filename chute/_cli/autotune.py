"""`chute autotune DATASET`: measure every backend this machine can run on DATASET at a batch
shape, print the table and the decision, and store the decision for backend="auto"
(`ImageOptions(backend="auto")`, or `VideoOptions(backend="auto")` for a video field).

The command always measures (it is how a decision is refreshed); `--no-cache` neither reads nor
writes the decision cache. `--json` prints exactly one JSON object on stdout; its schema is in
chute/autotune/_report.py (keys: choice, backend_options, reason, key, candidates[name, backend,
params, available, status, reason, img_per_s, cpu_percent, gpu_percent]). The progress display
goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from chute._cli._args import default_device, image_size, positive
from chute.errors import ChuteError

__all__ = ["add_parser", "run"]


# Without --image-size: an image field's default output size; a video field takes
# VideoOptions().size (read in `run`: importing it here would load torch for every command), so
# that a decision tuned with default options is the one `backend="auto"` finds for them.
IMAGE_SIZE = (224, 224)
VIDEO_SIZE_HELP = "256x256"  # VideoOptions().size, as --help says it (tests/autotune/test_cli.py)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from chute.autotune import DEFAULT_BUDGET

    p = subparsers.add_parser(
        "autotune",
        help="measure the backends on a dataset and store the fastest for backend='auto'",
        description="Measure every backend this machine can run (cpu threads x DCT scaling, "
        "DALI hw_decoder_load grid) on DATASET at the given batch shape, print img/s, CPU % "
        "and GPU % per candidate, and store the winner for ImageOptions(backend='auto') "
        "(VideoOptions(backend='auto') for a video field).",
    )
    p.add_argument("dataset", metavar="DATASET", help="a chute dataset directory")
    p.add_argument("--batch-size", type=positive(int), required=True)
    p.add_argument("--image-size", type=image_size, default=None, metavar="S|HxW",
                   help=f"output size (default {IMAGE_SIZE[0]} for an image field, "
                   f"{VIDEO_SIZE_HELP} for a video field: VideoOptions' default)")
    p.add_argument("--augment", choices=("train", "eval"), default="train")
    p.add_argument("--device", default=None,
                   help="cpu or cuda[:N] (default: cuda:0 when a CUDA device exists, else cpu)")
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32", "uint8"),
                   default=None, help="output dtype (default: float16 for images, uint8 for "
                   "video)")
    p.add_argument("--field", default=None, metavar="NAME",
                   help="the field to tune (default: 'image' when the dataset has one, else "
                   "its first video field)")
    p.add_argument("--num-frames", type=positive(int), default=16,
                   help="video: frames per clip (default 16)")
    p.add_argument("--frame-interval", type=positive(int), default=1,
                   help="video: take every k-th frame (default 1)")
    p.add_argument("--budget", type=positive(float), default=DEFAULT_BUDGET, metavar="SECONDS",
                   help=f"total time for all measurements (default {DEFAULT_BUDGET:g})")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor store the decision")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from chute.autotune import TuneParams, decision_path, format_table
    from chute.pipelines import tune_dataset
    from chute.readers import open_dataset

    dataset = open_dataset(args.dataset)
    field, media = _field(dataset, args.field)
    device = args.device or default_device()
    if media == "video":
        from chute.pipelines import tune_video

        dtype = args.dtype or "uint8"
        if dtype == "bfloat16":
            raise ChuteError("--dtype bfloat16 is not a video output dtype; use uint8, float16 "
                             "or float32")
        from chute import VideoOptions

        size = VideoOptions().size if args.image_size is None else args.image_size
        options = {"num_frames": args.num_frames, "frame_interval": args.frame_interval,
                   "size": size, "dtype": dtype}
        params = TuneParams(args.batch_size, size, args.augment, dtype, device)
        result = tune_video(dataset, field=field, options=options, device=device,
                            batch_size=args.batch_size, augment=args.augment,
                            budget=args.budget, use_cache=not args.no_cache,
                            progress=sys.stderr.isatty())
    else:
        size = IMAGE_SIZE if args.image_size is None else args.image_size
        params = TuneParams(args.batch_size, size, args.augment, args.dtype or "float16",
                            device)
        result = tune_dataset(dataset, params, budget=args.budget, use_cache=not args.no_cache,
                              progress=sys.stderr.isatty())
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"autotune {dataset.path} field {field!r} batch {params.batch_size} "
          f"{params.image_size[0]}x{params.image_size[1]} {params.augment} {params.dtype} "
          f"on {params.device} (budget {args.budget:g}s)\n")
    print(format_table(result))
    if not args.no_cache:
        print(f"  stored: {decision_path(result['key'])}")
    return 0


def _field(dataset, name: str | None) -> tuple[str, str]:
    """(field, its media) to tune: `name`, else "image", else the first video field."""
    from chute.pipelines import family_of

    specs = dataset.specs

    def media(f: str) -> str | None:
        try:
            return family_of(f, specs[f]).name
        except ValueError:  # a field no producer family reads
            return None

    if name is None:
        found = [f for f in specs if media(f) == "image"] or \
            [f for f in specs if media(f) == "video"]
        if not found:
            raise ChuteError(f"{dataset.path} has no image or video field to tune (it has "
                             f"{sorted(specs)}); only decoded fields have backends to choose")
        name = "image" if "image" in found else found[0]
    if name not in specs or media(name) not in ("image", "video"):
        raise ChuteError(f"--field {name!r}: {dataset.path} has no image or video field of "
                         f"that name (its fields: {sorted(specs)})")
    return name, str(media(name))
