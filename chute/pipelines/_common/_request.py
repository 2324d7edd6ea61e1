"""BatchRequest: what a plan asks the producers for one batch (docs/design.md, "Plans and
producers"), and the protocol of the per-sample parameter sources a plan evaluates (each
producer brings its own: the image producers' crops are `producers/image/_crops.CropParams`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

__all__ = ["BatchRequest", "ParamSource"]


@dataclass(frozen=True)
class BatchRequest:
    """One batch: global sample ids, per-sample parameters and the batch's output shapes.

    Attributes:
        iteration: the plan iteration this batch is (-1 for a substitute request).
        ids: int64 [B] global sample ids.
        params: per-sample parameters, each an array with B rows (e.g. "boxes" float64 [B, 4]
            as top/left/height/width, "flips" bool [B]).
        shapes: output key -> full shape of this batch's array (leading B); filled by the
            Pipeline from the producers (they may differ from batch to batch).
    """

    iteration: int
    ids: np.ndarray
    params: Mapping[str, np.ndarray] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


class ParamSource(Protocol):
    """A pure function (seed, epoch, ids) -> per-sample parameters. It holds the dataset
    columns it needs (a plan does no I/O) and compares equal by its configuration."""

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]: ...
