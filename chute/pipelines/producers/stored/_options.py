"""Options of fields delivered as stored: arrays (latents) and table lookups (docs/latents.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from chute.pipelines._common._options import suggest_options

__all__ = ["ArrayOptions", "Lookup"]

CastName = Literal["float16", "bfloat16", "float32", "float64"]


@suggest_options
@dataclass(frozen=True)
class ArrayOptions:
    """Options of an ndarray field (latents, embeddings):
    `fields={"latent": ArrayOptions(dtype="bfloat16")}`.

    Args:
        dtype: cast on the device after the copy ("float16", "bfloat16", "float32",
            "float64" or the torch dtype); None delivers the stored dtype.
    """

    dtype: CastName | torch.dtype | None = None


@suggest_options
@dataclass(frozen=True)
class Lookup:
    """A table field delivered through an index field: sample i gets the table's row
    `index[i]` (`fields={"clip_emb": Lookup("segment_to_video")}`).

    Args:
        index: the per-sample integer field holding each sample's row of the table.
        dtype: cast on the device, as `ArrayOptions.dtype`.
    """

    index: str
    dtype: CastName | torch.dtype | None = None
