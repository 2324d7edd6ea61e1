"""`chute info DST [--json] [--buckets CONFIG]`: samples, fields, shards, bytes and index
overhead; with --buckets, how a video dataset's clips fall into a Buckets config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chute._cli._args import positive


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "info", help="show samples, fields, shards, sizes and index overhead of a dataset",
        description="Summarise a chute dataset (or a Megatron-LM PREFIX.bin/.idx pair). "
        "overhead_pct = (index files + scalar columns) / payload bytes * 100.")
    parser.add_argument("dst", metavar="DST", help="dataset folder, zarr group or Megatron PREFIX")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--sample-array", default=None, metavar="ARRAY",
                        help="zarr groups whose arrays' first dimensions differ: the array "
                        "whose rows are the samples")
    buckets = parser.add_argument_group(
        "buckets", "a video dataset's clips per bucket of a Buckets config, and the samples "
        "in none by reason (what the Pipeline warns about; docs/video.md)")
    buckets.add_argument("--buckets", metavar="CONFIG", default=None,
                         help="a JSON file or JSON text: {resolution: {num_frames: [keep, "
                         "batch size]}} as chute.Buckets takes it")
    buckets.add_argument("--tolerance", type=positive(float), default=1.0,
                         help="Buckets(config, tolerance=...): the share of a resolution's "
                         "pixels a video needs (default 1.0: never upscaled)")
    buckets.add_argument("--frame-interval", type=positive(int), default=1,
                         help="the video field's frame_interval (default 1)")
    buckets.add_argument("--seed", type=int, default=0,
                         help="the Pipeline's seed (keep probabilities below 1 draw with it)")
    buckets.add_argument("--epoch", type=int, default=0, help="the epoch (default 0)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.readers import dataset_info, format_size, open_dataset

    info = dataset_info(args.dst, sample_array=args.sample_array)
    info["class_names"] = [] if info["format"] == "zarr" else \
        list(getattr(open_dataset(args.dst), "class_names", None) or [])
    if args.buckets is not None:  # computed only when asked: it needs the config
        try:
            info["buckets"] = _bucket_summary(args)
        except ValueError as exc:
            print(f"chute info: error: --buckets: {' '.join(str(exc).split())}",
                  file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    fields = ", ".join(f"{name} ({kind})" for name, kind in info["field_types"].items())
    sizes = info["bytes"]
    lines = [
        f"dataset     {info['path']} ({info['format']})",
        f"samples     {info['samples']}",
        f"fields      {fields}",
        f"shards      {info['shards']}",
        f"classes     {_classes(info['class_names'], 'label' in info['field_types'])}",
        f"payload     {format_size(sizes['payload'])}",
        f"index       {format_size(sizes['index'])}",
        f"columns     {format_size(sizes['columns'])}",
        f"metadata    {format_size(sizes['metadata'])} ({info['metadata_pct']:.3f}% of payload)",
        f"overhead    {info['overhead_pct']:.3f}% of payload (index + columns)",
        f"fingerprint {info['fingerprint']}",
    ]
    for name, array in info.get("arrays", {}).items():  # zarr groups
        lines.append(f"array       {name}: {format_size(array['stored_bytes'])} stored, "
                     f"{format_size(array['decoded_bytes'])} decoded")
    for name, constant in info.get("constants", {}).items():  # a zarr group's 0-d arrays
        lines.append(f"constant    {name}: {constant['dtype']} {constant['value']}")
    if "buckets" in info:
        lines += _bucket_lines(info["buckets"])
    print("\n".join(lines))
    return 0


def _bucket_summary(args) -> dict:
    """`Buckets(config, tolerance).summary(...)` of DST, with the options it was made with."""
    from chute.pipelines import Buckets
    from chute.readers import open_dataset

    text = args.buckets
    try:
        path = Path(text)
        if not text.lstrip().startswith("{") and path.is_file():
            text = path.read_text()
        config = json.loads(text)
    except (OSError, ValueError):
        raise ValueError(f"{args.buckets!r:.200} is neither a JSON file nor JSON text; give "
                         'e.g. \'{"240p": {"16": [1.0, 8]}}\'') from None
    if args.tolerance > 1:
        raise ValueError(f"--tolerance must be in (0, 1], got {args.tolerance}")
    summary = Buckets(config, args.tolerance).summary(
        open_dataset(args.dst), frame_interval=args.frame_interval, seed=args.seed,
        epoch=args.epoch)
    return {"config": config, "tolerance": args.tolerance,
            "frame_interval": args.frame_interval, "seed": args.seed, "epoch": args.epoch,
            **summary}


def _bucket_lines(summary: dict) -> list[str]:
    """The filled buckets one a line, the empty ones counted, the exclusions by reason."""
    counts = summary["buckets"]
    filled = {name: n for name, n in counts.items() if n}
    kept = sum(filled.values())
    lines = [f"buckets     {kept} of {summary['samples']} samples in {len(filled)} of "
             f"{len(counts)} buckets (frame interval {summary['frame_interval']}, tolerance "
             f"{summary['tolerance']:g}, seed {summary['seed']}, epoch {summary['epoch']})"]
    width = max((len(name) for name in filled), default=0)
    lines += [f"  {name:<{width}}  {n}" for name, n in filled.items()]
    for reason, n in summary["excluded"].items():
        ids = ", ".join(map(str, summary["examples"][reason]))
        lines.append(f"excluded    {n}: {reason} (first ids {ids})")
    return lines


def _classes(names: list[str], labelled: bool) -> str:
    if not names:  # integer labels without names are not "0 classes"
        return "no names (integer labels)" if labelled else "none (no label field)"
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"{len(names)} ({shown})"
