"""Write a zarr group in the precomputed-latents layout, with random values (deterministic seed).

    python benchmarks/make_latents.py OUT.zarr --segments 5000 --videos 1000 --chunk 1 \
        --codec zstd|blosc|none [--zarr-format 2|3] [--frames 20]

Arrays: `base_frames` float16 [S, frames, 4, 32, 32] chunked --chunk segments along S,
`clip_emb` float16 [V, 512] (one per video), `segment_to_video` int32 [S] (sorted: segments of
a video are consecutive). Values are N(0, 1) from seed 0, so two runs write the same store.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from chute.readers.zarr._zarr_codecs import CODECS, compressors


def make_latents(out: Path, segments: int, videos: int, chunk: int, codec: str,
                 zarr_format: int = 3, frames: int = 20, seed: int = 0) -> Path:
    """Write the store (replacing `out`); returns its path."""
    import zarr

    if out.exists():
        shutil.rmtree(out)
    rng = np.random.default_rng(seed)
    group = zarr.open_group(str(out), mode="w", zarr_format=zarr_format)
    codecs = compressors(codec, zarr_format)
    shape = (segments, frames, 4, 32, 32)
    frames_array = group.create_array("base_frames", shape=shape, dtype="float16",
                                      chunks=(chunk, *shape[1:]), compressors=codecs)
    block = max(chunk, 256 // chunk * chunk)
    for lo in range(0, segments, block):
        hi = min(lo + block, segments)
        frames_array[lo:hi] = rng.standard_normal((hi - lo, *shape[1:]), np.float32) \
            .astype(np.float16)
    emb = group.create_array("clip_emb", shape=(videos, 512), dtype="float16",
                             chunks=(min(videos, 1024), 512), compressors=codecs)
    emb[...] = rng.standard_normal((videos, 512), np.float32).astype(np.float16)
    index = group.create_array("segment_to_video", shape=(segments,), dtype="int32",
                               chunks=(segments,), compressors=codecs)
    index[...] = np.sort(rng.integers(0, videos, segments)).astype(np.int32)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--segments", type=int, default=5000)
    parser.add_argument("--videos", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=1)
    parser.add_argument("--codec", choices=CODECS, default="zstd")
    parser.add_argument("--zarr-format", type=int, choices=(2, 3), default=3)
    parser.add_argument("--frames", type=int, default=20)
    args = parser.parse_args()
    make_latents(args.out, args.segments, args.videos, args.chunk, args.codec,
                 args.zarr_format, args.frames)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
