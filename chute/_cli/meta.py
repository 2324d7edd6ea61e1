"""`chute meta update DST FILE.jsonl`: replace per-sample metadata, payloads untouched."""

from __future__ import annotations

from chute._cli._output import add_json_flag, print_json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "meta", help="manage per-sample JSON metadata (e.g. better captions)",
        description="Per-sample metadata lives apart from the payloads; updating it rewrites "
        "only the metadata files and the manifest.")
    actions = parser.add_subparsers(dest="meta_action", metavar="ACTION", required=True)
    update = actions.add_parser(
        "update", help="replace the metadata of samples matched by key",
        description="Each line of FILE.jsonl is a JSON object; it replaces the metadata of the "
        "sample whose metadata has the same value under --key (default 'key': the source path "
        "relative to the image folder, or the CSV `path` value, as stored by `chute convert`). "
        "Samples not in the file keep their metadata. On an audio dataset each record's "
        "segments are checked as `chute convert audio` checks them: one past the end of its "
        "recording, negative, reversed or empty is dropped and listed (--strict: refused). "
        "New files are written, then the manifest is swapped atomically; payload files are "
        "not touched. On a video dataset the `text` field (the caption) is rewritten with the "
        "metadata's \"text\", in the same switch-over.")
    update.add_argument("dst", metavar="DST", help="dataset folder")
    update.add_argument("jsonl", metavar="FILE.jsonl", help="one JSON object per line")
    update.add_argument("--key", default="key", help="metadata entry to match on (default key)")
    update.add_argument("--field", default="meta", help="JSON field to update (default meta)")
    update.add_argument("--merge", action="store_true",
                        help="merge each object into the existing metadata instead of replacing")
    update.add_argument("--allow-unmatched", action="store_true",
                        help="ignore lines whose key matches no sample (default: error)")
    update.add_argument("--strict", action="store_true",
                        help="refuse an update listing a segment its recording cannot deliver "
                        "(default: drop such segments, as convert does, and list them)")
    add_json_flag(update)
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.convert import update_metadata

    result = update_metadata(args.dst, args.jsonl, key=args.key, field=args.field,
                             merge=args.merge, allow_unmatched=args.allow_unmatched,
                             strict=args.strict)
    if args.json:
        print_json({"path": str(args.dst), "updated": result.updated,
                    "unmatched": list(result.unmatched),
                    "dropped_segments": [{"segment": w, "reason": r} for w, r in result.dropped]})
        return 0
    print(f"updated the metadata of {result.updated} samples in {args.dst}")
    for name in result.mirrored:
        print(f"field {name!r} rewritten with it (it holds the same value as the metadata)")
    if result.unmatched:
        print(f"{len(result.unmatched)} keys matched no sample (first: {result.unmatched[0]!r})")
    if result.dropped:
        print(f"dropped {len(result.dropped)} segments their recordings cannot deliver "
              "(--strict refuses them instead):")
        for where, reason in result.dropped[:_LISTED]:
            print(f"  {where}: {reason}")
        if len(result.dropped) > _LISTED:
            print(f"  ... and {len(result.dropped) - _LISTED} more (--json lists them all)")
    return 0


_LISTED = 20  # dropped segments printed one per line
