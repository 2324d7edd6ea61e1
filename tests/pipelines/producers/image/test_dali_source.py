"""The DALI external source: a pure, picklable function of BatchInfo (no GPU needed)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

pytest.importorskip("nvidia.dali")

from nvidia.dali.types import BatchInfo  # noqa: E402

import chute.pipelines.producers.image._dali_source as dali_source  # noqa: E402
from chute.errors import BackendUnavailableError  # noqa: E402
from chute.pipelines.producers.image._dali_source import DaliBatchSource  # noqa: E402
from chute.pipelines.sampling._plan import BatchPlan  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests.pipelines._dali_data import write_jpeg_dataset  # noqa: E402
from tests.pipelines._plans import image_batch, image_plan  # noqa: E402


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("dali") / "ds.chute"))


def make_plan(dataset, epoch=0, start=0, batch_size=6) -> BatchPlan:
    return image_plan(dataset, (32, 32), seed=7, epoch=epoch, batch_size=batch_size,
                      start=start)


def assert_same_batch(a, b) -> None:
    encoded_a, *rest_a = a
    encoded_b, *rest_b = b
    assert [bytes(x) for x in encoded_a] == [bytes(x) for x in encoded_b]
    for x, y in zip(rest_a, rest_b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_batch_is_the_plans_batch_as_zero_copy_views(dataset):
    plan = make_plan(dataset)
    encoded, anchor, shape, flip, index = DaliBatchSource(plan)(BatchInfo(1, 0))
    ids, boxes, flips = image_batch(plan, 1)
    np.testing.assert_array_equal(index, ids)
    np.testing.assert_array_equal(anchor, boxes[:, :2])
    np.testing.assert_array_equal(shape, boxes[:, 2:])
    np.testing.assert_array_equal(flip, flips.astype(np.int32))
    assert anchor.dtype == shape.dtype == np.float32 and index.dtype == np.int64
    for view, i in zip(encoded, ids, strict=True):
        assert view.dtype == np.uint8 and not view.flags.owndata  # a view of the shard's mmap
        assert bytes(view) == bytes(dataset[int(i)]["image"])


def test_same_batch_info_same_output_also_after_pickling(dataset):
    source = DaliBatchSource(make_plan(dataset), first_iteration=1)
    first = source(BatchInfo(0, 0))
    assert_same_batch(first, source(BatchInfo(0, 0)))
    clone = pickle.loads(pickle.dumps(source))
    assert clone._dataset is None  # the open dataset does not travel; the clone reopens it
    assert_same_batch(first, clone(BatchInfo(0, 0)))
    # Asking out of order (DALI prefetch, checkpoint restore) changes nothing.
    source(BatchInfo(1, 0))
    assert_same_batch(first, source(BatchInfo(0, 0)))


def test_first_iteration_and_epoch_idx_select_the_plan_batch(dataset):
    plan = make_plan(dataset, epoch=3, start=6)
    source = DaliBatchSource(plan, first_iteration=1)
    np.testing.assert_array_equal(source(BatchInfo(0, 0))[-1], image_batch(plan, 1)[0])
    # DALI epoch 2 after two resets: epoch 5 of the plan from its beginning.
    following = dataclasses.replace(plan, epoch=5, start_position=0)
    assert source.plan_for(2) == following
    np.testing.assert_array_equal(source(BatchInfo(1, 2))[-1], image_batch(following, 1)[0])
    assert not np.array_equal(source(BatchInfo(0, 2))[-1], source(BatchInfo(0, 0))[-1])


def test_stop_iteration_at_the_end_consistently(dataset):
    plan = make_plan(dataset)
    source = DaliBatchSource(plan)
    source(BatchInfo(len(plan) - 1, 0))
    for _ in range(2):  # DALI's prefetch may ask past the end more than once
        for ahead in (0, 1, 5):
            with pytest.raises(StopIteration):
                source(BatchInfo(len(plan) + ahead, 0))


def test_pinned_staging_gathers_into_a_ring_of_buffers(dataset, monkeypatch):
    allocations = []

    def fake_pinned(nbytes):  # the real one needs CuPy and a driver
        allocations.append(nbytes)
        return np.zeros(nbytes, dtype=np.uint8)

    monkeypatch.setattr(dali_source, "pinned_bytes", fake_pinned)
    plan = make_plan(dataset)
    pinned = DaliBatchSource(plan, staging="pinned", ring=2)
    plain = DaliBatchSource(plan)
    batches = [pinned(BatchInfo(it, 0)) for it in range(3)]
    assert len(allocations) == 2  # one per ring slot, the third batch reuses slot 0
    for it in (2,):  # the batch still held by its slot matches the plain views
        assert_same_batch(batches[it], plain(BatchInfo(it, 0)))
    encoded = batches[2][0]
    base = encoded[0].base
    assert all(view.base is base for view in encoded)  # one contiguous staging buffer
    assert pickle.loads(pickle.dumps(pinned))._slots == [None, None]


def test_pinned_staging_without_cupy_names_the_extra(dataset, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name.startswith("cupy"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    source = DaliBatchSource(make_plan(dataset), staging="pinned")
    with pytest.raises(BackendUnavailableError, match=r"pip install chute\[dali\]"):
        source(BatchInfo(0, 0))
