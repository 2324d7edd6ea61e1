"""`chute warmup`: compile the CPU decoder's kernels ahead of the first training run."""

from __future__ import annotations

import sys

from chute._cli._output import add_json_flag, print_json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "warmup", help="compile the CPU decoder once per machine (the first epoch then starts "
        "at once)",
        description="Compile (or load from Numba's on-disk cache) every variant of the CPU "
        "decoder's kernels: uint8/float16/float32 output in NCHW and NHWC. Without it, the "
        "first Pipeline on a machine spends about half a minute compiling on its first batch.")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.pipelines import warm_cpu_decoder

    # with --json the progress lines go to stderr and stdout holds one JSON object
    out = sys.stderr if args.json else sys.stdout
    steps: list[str] = []

    def report(line: str) -> None:
        steps.append(line)
        print(f"  {line}", file=out, flush=True)

    seconds = warm_cpu_decoder(report=report)
    if args.json:
        print_json({"ready": True, "seconds": seconds, "steps": steps})
        return 0
    print(f"CPU decoder ready ({seconds:.1f} s)")
    return 0
