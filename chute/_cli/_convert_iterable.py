"""`chute convert hf`: a Hugging Face `datasets` dataset, written with
`chute.readers.write_dataset`."""

from __future__ import annotations

from pathlib import Path

from chute._cli._output import print_json
from chute.errors import ChuteError

__all__ = ["convert_iterable"]


def convert_iterable(args) -> int:
    from chute.readers import write_dataset

    samples, class_names = _hf_samples(args)
    ds = write_dataset(samples, args.dst, shard_size=args.shard_size, overwrite=args.overwrite,
                       class_names=class_names, quality=args.quality)
    if args.json:
        print_json({"path": str(args.dst), "written": len(ds), "skipped": 0})
    else:
        print(f"wrote {len(ds)} samples to {args.dst}")
    return 0


def _hf_samples(args):
    try:
        import datasets
    except ImportError:
        raise ChuteError("`chute convert hf` needs the Hugging Face `datasets` package: "
                         "pip install datasets") from None
    if Path(args.src).is_dir():
        table = datasets.load_from_disk(args.src)
        table = table[args.split] if isinstance(table, datasets.DatasetDict) else table
    else:
        table = datasets.load_dataset(args.src, split=args.split)
    if args.image_column not in table.column_names:
        raise ChuteError(f"{args.src}: no column {args.image_column!r} (it has "
                         f"{table.column_names}); pass --image-column")
    label_feature = table.features.get(args.label_column)
    class_names = list(getattr(label_feature, "names", None) or []) or None
    encoded = isinstance(table.features[args.image_column], datasets.Image)
    if encoded:
        # The files' bytes, not decoded PIL images: JPEGs are then stored as they are instead
        # of being re-encoded (a second lossy generation).
        table = table.cast_column(args.image_column, datasets.Image(decode=False))

    def samples():
        for i, row in enumerate(table):
            image = row.pop(args.image_column)
            sample = {"image": _image_bytes(image, args.src, i) if encoded else image}
            if args.label_column in row:
                sample["label"] = int(row.pop(args.label_column))
            sample["meta"] = {"key": str(i), **{k: v for k, v in row.items()
                                                if isinstance(v, (str, int, float, bool))}}
            yield sample

    return samples(), class_names


def _image_bytes(value: dict, src, row: int) -> bytes:
    """The encoded image of an undecoded `datasets.Image` value ({"bytes", "path"})."""
    if value.get("bytes") is not None:
        return value["bytes"]
    if value.get("path"):
        return Path(value["path"]).read_bytes()
    raise ChuteError(f"{src}: row {row} has an empty image (no bytes and no path); fix or drop "
                     "the row")
