"""The order of an epoch's samples when a source or `shuffle=` brings its own (docs/pipeline.md):
a `chute.mix` source's sampler, or `ShardWindows` over the shards of one dataset. Without one,
the batching shuffles (or keeps) dataset order itself."""

from __future__ import annotations

from typing import Any

from chute.pipelines.sampling._batching import FixedBatches
from chute.pipelines.sampling._windows import ShardWindows

__all__ = ["epoch_order"]


def epoch_order(dataset, shuffle, unit, batching) -> Any:
    """The sampler that orders each epoch (`count` samples, ids per epoch), or None.

    Args:
        dataset: the open dataset (a mix brings its own sampler).
        shuffle: the Pipeline's `shuffle=` (a ShardWindows brings one).
        unit: the Pipeline's sample unit, or None (rows).
        batching: the bound batching.
    """
    sampler = dataset.sampler
    if isinstance(shuffle, ShardWindows):
        if sampler is not None or unit is not None or not isinstance(batching, FixedBatches):
            raise ValueError(f"{dataset.path}: shuffle=ShardWindows(...) orders whole "
                             "samples of one dataset in fixed batches; it is not available "
                             "with chute.mix, MaxDuration, Buckets or audio segment units")
        sampler = shuffle.bind(dataset)
    if sampler is not None and (unit is not None or not isinstance(batching, FixedBatches)):
        raise ValueError(f"{dataset.path}: a chute.mix source takes fixed batches of "
                         "whole rows; MaxDuration, Buckets and audio segment units are not "
                         "available with it (build one Pipeline per dataset for them)")
    return sampler
