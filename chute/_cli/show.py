"""`chute show DATASET --out grid.png`: a picture of a batch, as the model will see it."""

from __future__ import annotations

import math
import os

from chute._cli._args import EVAL_CROPS, image_size, positive
from chute._cli._output import add_json_flag, print_json
from chute.errors import ChuteError

__all__ = ["add_parser", "run", "CAPTION_HEIGHT"]

CAPTION_HEIGHT = 14  # pixels under each tile for "index: label"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "show", help="write a PNG grid of decoded, augmented samples with their indices/labels",
        description="Decode and augment the first batch of an epoch exactly as a Pipeline with "
        "these settings would (before normalisation: uint8 pixels) and write the images as a "
        "grid, each captioned 'index: label', so you can see what the model will see.")
    parser.add_argument("dataset", metavar="DATASET", help="chute dataset folder (images)")
    parser.add_argument("--out", required=True, metavar="PNG", help="the image to write")
    parser.add_argument("--count", type=positive(int), default=16, help="samples (default 16)")
    parser.add_argument("--image-size", type=image_size, default=128,
                        help="tile size, S or HxW (default 128)")
    parser.add_argument("--augment", choices=("train", "eval"), default="eval",
                        help="train: the random crops and flips of training (default: eval)")
    parser.add_argument("--eval-crop", choices=EVAL_CROPS, default=EVAL_CROPS[0],
                        help="how eval crops are made (default: torchvision, Resize + "
                        "CenterCrop; crop-resize: FFCV's)")
    parser.add_argument("--epoch", type=int, default=0, help="epoch of the crops (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="the Pipeline seed (default 0)")
    parser.add_argument("--field", default="image", help="image field (default image)")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    import numpy as np
    from PIL import Image, ImageDraw

    from chute import ImageOptions
    from chute._cli._fields import build_pipeline, image_fields
    from chute.readers import Dataset, open_dataset

    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder) or os.path.isdir(args.out):
        raise ChuteError(f"--out {args.out}: " + ("is a folder; name the PNG file to write"
                                                  if os.path.isdir(args.out) else
                                                  f"its folder {folder} does not exist"))
    ds = open_dataset(args.dataset)
    images_in = image_fields(ds)
    if args.field not in images_in:
        raise ChuteError(
            f"{args.dataset} has no image field, so there is nothing to draw (fields: "
            f"{sorted(ds.specs)}); chute show draws image datasets" if not images_in else
            f"--field {args.field}: not an image field of {args.dataset} (its image fields: "
            f"{images_in})")
    count = min(args.count, len(ds))
    fields = {args.field: ImageOptions(size=args.image_size, backend="cpu", dtype="uint8",
                                       layout="NHWC", eval_crop=args.eval_crop)}
    if "label" in ds.fields:
        fields["label"] = None
    with build_pipeline(ds, count, fields=fields, augment=args.augment, device="cpu",
                  seed=args.seed, rank=0, world_size=1, drop_last=False) as pipe:
        pipe.set_epoch(args.epoch)
        batch = next(iter(pipe))
        images = batch[args.field].numpy().copy()
        ids = batch["index"].tolist()
        labels = batch["label"].tolist() if "label" in batch else [None] * len(ids)
    names = (ds.class_names if isinstance(ds, Dataset) else None) or []
    n, h, w = images.shape[:3]
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    cell_h = h + CAPTION_HEIGHT
    grid = Image.new("RGB", (cols * w, rows * cell_h), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    for k in range(n):
        top, left = (k // cols) * cell_h, (k % cols) * w
        grid.paste(Image.fromarray(np.ascontiguousarray(images[k])), (left, top))
        label = labels[k]
        text = f"{ids[k]}" if label is None else f"{ids[k]}: {_label_name(label, names)}"
        draw.text((left + 2, top + h + 1), text, fill=(0, 0, 0))
    try:
        grid.save(args.out)
    except (OSError, ValueError) as exc:  # unwritable, or an extension Pillow does not know
        raise ChuteError(f"--out {args.out}: cannot write it ({exc})") from None
    if args.json:
        print_json({"path": str(args.out), "dataset": str(args.dataset), "samples": n,
                    "augment": args.augment, "epoch": args.epoch, "grid": [cols, rows],
                    "tile": [h, w], "indices": ids, "labels": labels})
        return 0
    print(f"wrote {n} samples of {args.dataset} ({args.augment}, epoch {args.epoch}) to "
          f"{args.out}: {cols} x {rows} tiles of {h}x{w} px; indices {ids}")
    return 0


def _label_name(label: int, names: list[str]) -> str:
    return names[label] if 0 <= label < len(names) else str(label)
