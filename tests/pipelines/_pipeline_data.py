"""Small generated datasets for the Pipeline and producer tests (the one writer they share)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from chute._sample_images import synthetic_jpeg
from tests._datasets import write_samples
from tests._media import undefined_quant_table

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32",
          "meta": "json"}


def latent_of(i: int, shape=(4, 8, 8)) -> np.ndarray:
    """The float16 array stored as sample i's latent (a pure function of i)."""
    rng = np.random.default_rng(10_000 + i)
    return rng.standard_normal(shape).astype(np.float16)


# write_dataset's `damage`: what it does to the payloads of the samples in `corrupt`
DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncate": lambda payload: payload[: len(payload) // 3],
    "bad-table": undefined_quant_table,
}


def write_dataset(path: Path, n: int = 40, sizes=(24, 48), seed: int = 0,
                  corrupt: tuple[int, ...] = (), shard_size="16KiB", *, meta: bool = True,
                  label: Callable[[int], int] = lambda i: 1000 + i,
                  latent_shape: tuple[int, ...] | None = None, images: bool = True,
                  damage: str = "truncate") -> Path:
    """n synthetic JPEGs (several shards); samples in `corrupt` are truncated to a third
    (`damage="bad-table"`: complete but naming a quantisation table they lack, which the GPU
    readers' header check passes on to the decoder, and the decoder fails).
    `latent_shape` adds an ndarray field "latent" (`latent_of(i)`); images=False leaves the
    JPEG fields out (a latents-only dataset)."""
    damaged = DAMAGES[damage]
    rng = np.random.default_rng(seed)
    fields = dict(FIELDS) if images else {"label": "int64"}
    if not meta:
        fields.pop("meta", None)
    if latent_shape is not None:
        fields["latent"] = "ndarray"

    def samples():
        for i in range(n):
            sample = {"label": label(i)}
            if images:
                height, width = (int(v) for v in rng.integers(sizes[0], sizes[1], size=2))
                payload = synthetic_jpeg(rng, height, width)
                if i in corrupt:
                    payload = damaged(payload)
                sample.update(image=payload, height=height, width=width)
            if "meta" in fields:
                sample["meta"] = {"id": i}
            if latent_shape is not None:
                sample["latent"] = latent_of(i, latent_shape)
            yield sample

    return write_samples(path, fields, samples(), shard_size)
