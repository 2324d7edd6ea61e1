"""`chute warmup`: compile the CPU decoder's kernels ahead of the first training run."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "warmup", help="compile the CPU decoder once per machine (the first epoch then starts "
        "at once)",
        description="Compile (or load from Numba's on-disk cache) every variant of the CPU "
        "decoder's kernels: uint8/float16/float32 output in NCHW and NHWC. Without it, the "
        "first Pipeline on a machine spends about half a minute compiling on its first batch.")
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.pipelines import warm_cpu_decoder

    seconds = warm_cpu_decoder(report=lambda line: print(f"  {line}", flush=True))
    print(f"CPU decoder ready ({seconds:.1f} s)")
    return 0
