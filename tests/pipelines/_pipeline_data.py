"""Small generated datasets and a test backend for the Pipeline tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute._sample_images import synthetic_jpeg
from chute.readers import ShardWriter

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32",
          "meta": "json"}


def write_dataset(path: Path, n: int = 40, sizes=(24, 48), seed: int = 0,
                  corrupt: tuple[int, ...] = (), shard_size="16KiB") -> Path:
    """n synthetic JPEGs (several shards); samples in `corrupt` are truncated to a third."""
    rng = np.random.default_rng(seed)
    with ShardWriter(path, FIELDS, shard_size=shard_size) as writer:
        for i in range(n):
            height, width = (int(v) for v in rng.integers(sizes[0], sizes[1], size=2))
            payload = synthetic_jpeg(rng, height, width)
            if i in corrupt:
                payload = payload[: len(payload) // 3]
            writer.write({"image": payload, "label": 1000 + i, "height": height, "width": width,
                          "meta": {"id": i}})
    return path
