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
import os
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chute.pipelines import ImageOptions, Pipeline  # noqa: E402
from tests.pipelines._pipeline_data import write_dataset  # noqa: E402
from tests.pipelines.test_fork_safety import _child_decodes, _wait_all  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=200, help="children in all (rounds "
                        "of 20)")
    args = parser.parse_args()
    faulthandler.enable(all_threads=True)  # a crashing child prints where
    warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: what we test
    path = write_dataset(Path(tempfile.mkdtemp()) / "ds.chute", n=24, sizes=(300, 400),
                         shard_size="1MiB")
    image = ImageOptions(size=64, backend="cpu", dtype="float32")
    pipe = Pipeline(path, 8, fields={"image": image, "label": None}, device="cpu", rank=0,
                    world_size=1, prefetch=1)
    stop, decoding = threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for _ in pipe:
                decoding.set()
                if stop.is_set():
                    break

    assert _child_decodes(pipe, 0) == 0  # compiled here, not in every child
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    decoding.wait(120)
    codes: list = []
    for round_ in range(max(1, args.children // 20)):
        pids = []
        for k in range(20):
            time.sleep(0.01 + 0.003 * k)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child_decodes(pipe, k)
                finally:
                    os._exit(code)
            pids.append(pid)
        got = _wait_all(pids, time.monotonic() + 90)
        codes += got
        print(round_, got, flush=True)
    stop.set()
    thread.join(60)
    pipe.close()
    print("exit codes of the children (0: decoded; -11: SIGSEGV; None: hung):",
          dict(Counter(codes)))


if __name__ == "__main__":
    main()
