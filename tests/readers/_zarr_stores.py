"""Small zarr groups in the latents layout, written at test time: `base_frames` [S, 3, 2, 4]
float16 per segment, `clip_emb` [V, 8] float16 per video, `segment_to_video` int32 [S]."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.readers.zarr._zarr_codecs import compressors

FRAMES = (3, 2, 4)
EMB = 8


def latents_values(segments: int, videos: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "base_frames": rng.standard_normal((segments, *FRAMES)).astype(np.float16),
        "clip_emb": rng.standard_normal((videos, EMB)).astype(np.float16),
        "segment_to_video": np.sort(rng.integers(0, videos, segments)).astype(np.int32),
    }


def write_store(path: Path, values: dict[str, np.ndarray], *, zarr_format: int = 3,
                chunk: int = 1, codec: str = "zstd", shard: int | None = None,
                dense: bool = True) -> Path:
    """A zarr group at `path` with `values`, per-sample arrays chunked `chunk` rows along the
    first dimension (inside shards of `shard` rows when given: v3 only). A name with '/'
    writes into subgroups; a 0-d value is a 0-d array. `dense`: every chunk written, also
    those equal to the fill value (zarr skips them by default: chute reads an absent chunk as
    missing unless told)."""
    import zarr

    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    for name, value in values.items():
        if np.ndim(value) == 0:  # a 0-d array (a stored mean or scale): one chunk of shape ()
            value = np.asarray(value)
            array = group.create_array(name, shape=(), dtype=value.dtype, chunks=(),
                                       compressors=compressors(codec, zarr_format))
            array[...] = value
            continue
        chunks = (min(chunk, len(value)), *value.shape[1:])
        shards = None if shard is None else (min(shard, len(value)), *value.shape[1:])
        if shards is not None:
            shards = (-(-shards[0] // chunks[0]) * chunks[0], *shards[1:])
        array = group.create_array(name, shape=value.shape, dtype=value.dtype, chunks=chunks,
                                   shards=shards, compressors=compressors(codec, zarr_format),
                                   config={"write_empty_chunks": dense})
        array[...] = value
    return path


def open_latents(path: Path, **options):
    """The latents layout opened as chute reads it: `base_frames` names the samples (the
    arrays' first dimensions differ: segments, videos)."""
    from chute.readers import open_dataset

    return open_dataset(path, sample_array="base_frames", **options)
