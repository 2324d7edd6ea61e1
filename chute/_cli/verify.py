"""`chute verify DST`: check every file's checksum against the manifest."""

from __future__ import annotations

import sys

from chute._cli._output import add_json_flag, print_json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify", help="check every file's size and checksum; non-zero exit on any mismatch",
        description="Recompute the checksum of every file listed in DST/chute.json and check "
        "the index structure. Exits 1 and names each bad file on any problem.")
    parser.add_argument("dst", metavar="DST", help="dataset folder (a zarr group: every chunk "
                        "decoded; a Megatron PREFIX: structure checks only; neither has "
                        "checksums)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--missing-chunks", choices=("error", "fill"), default="error",
                        help="zarr groups: report absent chunk files (default), or accept them "
                        "as zarr's fill value (arrays written sparse on purpose)")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.readers import verify_dataset, verify_kind

    problems = verify_dataset(args.dst, progress=not args.no_progress and not args.json,
                              missing_chunks=args.missing_chunks)
    # whether the dataset has checksums (and they were checked), failed or not: a chute
    # dataset, local or remote; not a zarr group, nor a Megatron PREFIX (no folder)
    kind = verify_kind(args.dst)
    zarr, checksums = kind == "zarr", kind in ("remote", "chute")
    if args.json:
        print_json({"path": str(args.dst), "ok": not problems, "checksums": checksums,
                    "problems": problems})
        return 1 if problems else 0
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        print(f"{args.dst}: {len(problems)} problem(s); restore those files or re-convert",
              file=sys.stderr)
        return 1
    if checksums:
        print(f"{args.dst}: OK, every checksum matches")
    elif zarr:
        print(f"{args.dst}: OK, every chunk of every array decodes (a zarr group has no "
              "checksums to check)")
    else:
        print(f"{args.dst}: structure OK (a Megatron .bin/.idx pair has no checksums to check)")
    return 0
