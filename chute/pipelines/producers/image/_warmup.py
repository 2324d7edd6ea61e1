"""The CPU decoder's Numba kernels: compiled on first use (about half a minute), then cached on
disk by Numba (`cache=True`), so later processes load them in a moment.

The first use on a machine says so in one line instead of stalling silently; `chute warmup`
(`warm_cpu_decoder`) compiles every output variant ahead of time. Whether this machine has
compiled them is remembered by a marker file in chute's cache folder, named after the chute and
Numba versions (a new version compiles again).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from chute._fork import ProcessLock

if TYPE_CHECKING:
    from chute._output_types import Layout

__all__ = ["note_first_compile", "mark_compiled", "warm_cpu_decoder", "VARIANTS"]

# (dtype, layout) pairs the cpu backend compiles a kernel variant for
VARIANTS: tuple[tuple[str, Layout], ...] = (
    ("uint8", "NCHW"), ("uint8", "NHWC"), ("float16", "NCHW"), ("float16", "NHWC"),
    ("float32", "NCHW"), ("float32", "NHWC"))

_lock = ProcessLock()
_noted: set = set()


def _marker(variant: str) -> Path:
    import numba

    from chute._cache_dir import cache_dir
    from chute._version import __version__

    return cache_dir() / "compiled" / (f"cpu-decoder-{variant}-chute{__version__}"
                                         f"-numba{numba.__version__}")


def note_first_compile(variant: str) -> None:
    """Print one line on stderr, once per process, when this machine has not compiled the CPU
    decoder's `variant` yet (the first batch is about to take tens of seconds).

    Args:
        variant: the kernel variant, e.g. "float16-NCHW".
    """
    with _lock:
        if variant in _noted:
            return
        _noted.add(variant)
        if not _marker(variant).exists():
            print("chute: compiling the CPU decoder (once per machine, ~30 s; `chute warmup` "
                  "does it ahead)...", file=sys.stderr, flush=True)


def mark_compiled(variant: str) -> None:
    """Remember that the kernels of `variant` are compiled and cached on this machine.

    Args:
        variant: the kernel variant, e.g. "float16-NCHW".
    """
    path = _marker(variant)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def warm_cpu_decoder(report=None) -> float:
    """Compile (or load from Numba's cache) every CPU decoder variant; returns seconds taken.

    Args:
        report: called with a line of progress per variant (default: nothing).
    """
    import numpy as np

    from chute._sample_images import synthetic_jpeg
    from chute.convert import ShardWriter
    from chute.pipelines.producers._tune_runner import open_pipeline
    from chute.pipelines.producers.image._options import ImageOptions

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="chute-warmup-") as tmp:
        path = Path(tmp) / "warmup.chute"
        fields = {"image": "bytes", "height": "int32", "width": "int32"}
        with ShardWriter(path, fields) as writer:
            for _ in range(4):
                writer.write({"image": synthetic_jpeg(rng, 48, 40), "height": 48, "width": 40})
        for dtype, layout in VARIANTS:
            t0 = time.perf_counter()
            image = ImageOptions(size=16, backend="cpu", backend_options={"threads": 1},
                                 dtype=dtype, layout=layout)
            with open_pipeline(path, 2, fields={"image": image}, device="cpu", rank=0,
                               world_size=1) as pipe:
                for _ in pipe:
                    pass
            if report is not None:
                report(f"{dtype} {layout}: {time.perf_counter() - t0:.1f} s")
    return time.perf_counter() - start
