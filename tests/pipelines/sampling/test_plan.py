"""BatchPlan (chute/pipelines/sampling/_plan.py): batch ids evaluated in blocks equal the order of
each batch's own positions, in any access order."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from chute.pipelines.sampling._plan import _ORDER_BLOCK, BatchPlan


@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ids_are_the_order_of_the_batch_positions(world, drop_last):
    n = 64 * _ORDER_BLOCK * 2 * world + 37  # over two blocks a rank, a partial last batch
    for rank in range(world):
        plan = BatchPlan(None, n, 5, 2, rank, world, 64, drop_last, 130)
        batches = range(len(plan))
        picks = [*reversed(batches), *batches, _ORDER_BLOCK + 1, 0, len(plan) - 1]
        for i in picks:  # backwards, forwards and jumping between blocks
            np.testing.assert_array_equal(plan.ids(i), plan.order(plan.positions(i)))
        copy = pickle.loads(pickle.dumps(plan))
        assert copy == plan
        np.testing.assert_array_equal(copy.ids(3), plan.order(plan.positions(3)))
        with pytest.raises(StopIteration):
            plan.ids(len(plan))
