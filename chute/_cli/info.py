"""`chute info DST [--json]`: samples, fields, shards, bytes and index overhead."""

from __future__ import annotations

import json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "info", help="show samples, fields, shards, sizes and index overhead of a dataset",
        description="Summarise a chute dataset (or a Megatron-LM PREFIX.bin/.idx pair). "
        "overhead_pct = (index files + scalar columns) / payload bytes * 100.")
    parser.add_argument("dst", metavar="DST", help="dataset folder or Megatron PREFIX")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--sample-array", default=None, metavar="ARRAY",
                        help="zarr groups whose arrays' first dimensions differ: the array "
                        "whose rows are the samples")
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.readers import dataset_info, format_size, open_dataset

    info = dataset_info(args.dst, sample_array=args.sample_array)
    info["class_names"] = [] if info["format"] == "zarr" else \
        list(getattr(open_dataset(args.dst), "class_names", None) or [])
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
    print("\n".join(lines))
    return 0


def _classes(names: list[str], labelled: bool) -> str:
    if not names:  # integer labels without names are not "0 classes"
        return "no names (integer labels)" if labelled else "none (no label field)"
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"{len(names)} ({shown})"
