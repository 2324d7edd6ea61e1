"""Image plans for tests that drive producers or the DALI source directly."""

from __future__ import annotations

import numpy as np

from chute.pipelines import BatchPlan, CropConfig, CropParams
from chute.readers import DatasetRef


def image_plan(dataset, size, *, seed=0, epoch=0, batch_size=6, drop_last=True, start=0,
               mode="train", rank=0, world_size=1) -> BatchPlan:
    crops = CropParams(CropConfig(size, mode=mode), np.asarray(dataset.column("height")),
                       np.asarray(dataset.column("width")))
    return BatchPlan(DatasetRef.of(dataset), len(dataset), seed, epoch, rank, world_size,
                     batch_size, drop_last, start, (crops,))


def image_batch(plan: BatchPlan, iteration: int):
    """(ids, boxes, flips) of one batch of an image plan."""
    request = plan.request(iteration)
    return request.ids, request.params["boxes"], request.params["flips"]
