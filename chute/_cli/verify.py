"""`chute verify DST`: check every file's checksum against the manifest."""

from __future__ import annotations

import sys


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify", help="check every file's size and checksum; non-zero exit on any mismatch",
        description="Recompute the checksum of every file listed in DST/chute.json and check "
        "the index structure. Exits 1 and names each bad file on any problem.")
    parser.add_argument("dst", metavar="DST", help="dataset folder (a Megatron PREFIX gets "
                        "structure checks only: it has no checksums)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.readers import verify_dataset

    problems = verify_dataset(args.dst, progress=not args.no_progress)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if problems:
        print(f"{args.dst}: {len(problems)} problem(s); restore those files or re-convert",
              file=sys.stderr)
        return 1
    print(f"{args.dst}: OK, every checksum matches")
    return 0
