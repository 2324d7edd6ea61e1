"""The one test dataset writer: samples (dicts) into a chute dataset with ShardWriter.
Test packages build their samples (JPEGs, random payloads, latents) and call it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from chute.convert import ShardWriter


def write_samples(path: Path, fields: dict, samples: Iterable[dict], shard_size="1GiB",
                  **kwargs) -> Path:
    with ShardWriter(path, fields, shard_size=shard_size, **kwargs) as writer:
        for sample in samples:
            writer.write(sample)
    return path
