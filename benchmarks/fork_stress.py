"""How often a child forked while a Pipeline decodes fails to decode (docs/design.md, "Processes
and threads"): a thread of this process iterates a Pipeline on the cpu backend while the main
thread forks children in rounds of 20; each child decodes a JPEG and, every other child, a
batch of the parent's Pipeline (tests/pipelines/test_fork_safety.py's check, many more times).

Before a fork waited for the decode in flight, about 1 child in 200 died of SIGSEGV (-11) in
its first parallel decode. Prints each round's exit codes and their count at the end.

    .venv/bin/python benchmarks/fork_stress.py --children 600
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.pipelines.test_fork_safety import (  # noqa: E402
    DEADLINE_S,
    decoding_pipeline,
    fork_children,
    wait_all,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=200, help="children in all (rounds "
                        "of 20)")
    args = parser.parse_args()
    faulthandler.enable(all_threads=True)  # a crashing child prints where
    warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: what we test
    codes: list = []
    with decoding_pipeline(Path(tempfile.mkdtemp())) as pipe:
        for round_ in range(max(1, args.children // 20)):
            got = wait_all(fork_children(pipe, 20), time.monotonic() + DEADLINE_S)
            codes += got
            print(round_, got, flush=True)
    print("exit codes of the children (0: decoded; -11: SIGSEGV; None: hung):",
          dict(Counter(codes)))


if __name__ == "__main__":
    main()
