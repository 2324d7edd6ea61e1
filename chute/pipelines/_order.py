"""`Pipeline(order=...)`: how each epoch orders its samples (docs/pipeline.md, "Order").

- "shuffle" (the default): a keyed global shuffle, new each epoch;
- "sequential": the source's own order every epoch (e.g. a sequential evaluation);
- `ShardWindows(shards=k)`: the shards in a keyed order, samples shuffled within windows of k
  shards (a dataset in object storage larger than its node cache: docs/storage.md).

A `chute.mix` source brings its own epochs (which rows, by weight); the order then says whether
they are shuffled. Every order has the same resume state (`{seed, epoch, position, ...}`): each
is a pure function of (seed, epoch)."""

from __future__ import annotations

from typing import Any, Literal, cast

from chute.pipelines.sampling._batching import FixedBatches
from chute.pipelines.sampling._windows import ShardWindows

__all__ = ["Order", "ORDERS", "epoch_order", "check_order"]

Order = Literal["shuffle", "sequential"] | ShardWindows
ORDERS = ("shuffle", "sequential")


def check_order(order: Any) -> Order:
    """`order` if it is one; else a TypeError saying what is.

    Args:
        order: what was passed as the Pipeline's `order=`.
    """
    if isinstance(order, ShardWindows) or (isinstance(order, str) and order in ORDERS):
        return cast(Order, order)
    raise TypeError(f"Pipeline order must be 'shuffle', 'sequential' or ShardWindows(shards=k), "
                    f"got {order!r}")


def epoch_order(dataset, order: Order, unit, batching) -> tuple[bool, Any]:
    """(shuffled, sampler): whether positions are shuffled, and the sampler that orders each
    epoch (`count` samples, `order(seed, epoch, shuffled)`), or None for the dataset's rows.

    Args:
        dataset: the open dataset (a mix brings its own sampler).
        order: the Pipeline's `order=`.
        unit: the Pipeline's sample unit, or None (rows).
        batching: the bound batching.
    """
    sampler = dataset.sampler
    if isinstance(order, ShardWindows):
        if sampler is not None or unit is not None or not isinstance(batching, FixedBatches):
            raise ValueError(f"{dataset.path}: order=ShardWindows(...) orders whole "
                             "samples of one dataset in fixed batches; it is not available "
                             "with chute.mix, MaxDuration, Buckets or audio segment units")
        sampler = order.bind(dataset)
    if sampler is not None and (unit is not None or not isinstance(batching, FixedBatches)):
        raise ValueError(f"{dataset.path}: a chute.mix source takes fixed batches of "
                         "whole rows; MaxDuration, Buckets and audio segment units are not "
                         "available with it (build one Pipeline per dataset for them)")
    return order != "sequential", sampler
