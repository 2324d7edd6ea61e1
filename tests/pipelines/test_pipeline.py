"""Pipeline order, resume, lifetime and shutdown, with a backend that writes sample ids."""

import gc
import threading
import time

import numpy as np
import pytest
import torch

import chute.pipelines.producers._registry as producer_registry
import chute.pipelines.sampling._plan as plan_module
from chute.pipelines import EpochOrder, ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset

N = 53


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("pipe") / "ds.chute", n=N)


@pytest.fixture(autouse=True)
def id_backend(monkeypatch):
    monkeypatch.setitem(producer_registry.PRODUCERS, "test-ids", "tests.pipelines._id_backend")
    from tests.pipelines import _id_backend

    _id_backend.CALLS.clear()
    return _id_backend


def make(path, batch_size=4, fields=("image", "label", "meta"), backend="test-ids", **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    image = ImageOptions(size=8, backend=backend, dtype="float32")
    return Pipeline(path, batch_size, fields={f: image if f == "image" else None for f in fields},
                    **kw)


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("chute-prefetch")]


def ids_of(batches):
    return [b.tolist() for b in batches]


def collect(pipe, limit=None):
    out = []
    for batch in pipe:
        image = batch["image"]
        ids = batch["index"]
        # every image row is the one of its index, labels and metadata follow the index
        assert torch.equal(image.amax(dim=(1, 2, 3)), ids.to(image.dtype))
        assert torch.equal(image.amin(dim=(1, 2, 3)), ids.to(image.dtype))
        assert torch.equal(batch["label"], ids + 1000)
        assert [m["id"] for m in batch["meta"]] == ids.tolist()
        out.append(batch["index"].clone())
        if len(out) == limit:
            break
    return out


def test_eval_epoch_follows_the_keyed_order(dataset_path):
    with make(dataset_path, augment="eval", fields=("image", "label", "meta"), seed=9) as pipe:
        got = torch.cat(collect(pipe)).numpy()
        assert len(pipe) == -(-N // 4)
    assert np.array_equal(got, EpochOrder(N, 9, 0)(np.arange(N)))


def test_train_drops_the_tail_and_next_iteration_is_the_next_epoch(dataset_path):
    with make(dataset_path, fields=("image", "label", "meta")) as pipe:
        first = torch.cat(collect(pipe)).numpy()
        assert len(first) == (N // 4) * 4 and len(np.unique(first)) == len(first)
        state = pipe.state_dict()
        assert (state["epoch"], state["position"]) == (1, 0)  # finished: the next one's start
        second = torch.cat(collect(pipe)).numpy()  # no set_epoch: the next epoch, not a repeat
        assert pipe.epoch == 1
        assert not np.array_equal(first, second)
        pipe.set_epoch(0)
        again = torch.cat(collect(pipe)).numpy()
    assert np.array_equal(first, again)


@pytest.mark.parametrize("world_size", [1, 3])
def test_exact_resume(dataset_path, world_size):
    def run(rank, stop=None, state=None):
        pipe = make(dataset_path, rank=rank, world_size=world_size, seed=4)
        pipe.set_epoch(2)
        if state is not None:
            pipe.load_state_dict(state)
            pipe.set_epoch(2)  # the usual loop calls set_epoch again: it must keep the position
        got = collect(pipe, stop)
        state = pipe.state_dict()
        pipe.close()
        return got, state

    for rank in range(world_size):
        full, _ = run(rank)
        head, state = run(rank, stop=2)
        assert state["position"] == 2 * 4 * world_size
        tail, _ = run(rank, state=state)
        assert ids_of(head + tail) == ids_of(full)


@pytest.mark.parametrize("new_world", [2, 3])
def test_elastic_resume_delivers_every_remaining_position_once(dataset_path, new_world):
    old = [make(dataset_path, augment="eval", rank=r, world_size=4, seed=1) for r in range(4)]
    iters = [iter(p) for p in old]
    delivered = [next(it)["index"].clone() for it in iters for _ in range(2)]  # 2 rounds each
    state = old[0].state_dict()
    assert all(p.state_dict() == state for p in old)
    assert state["position"] == 2 * 4 * 4
    del iters
    for p in old:
        p.close()
    new = [make(dataset_path, augment="eval", rank=r, world_size=new_world)
           for r in range(new_world)]
    for p in new:
        p.load_state_dict(state)
        delivered += collect(p)
        p.close()
    ids = torch.cat(delivered).numpy()
    assert np.array_equal(np.sort(ids), np.arange(N))  # all of them, none twice


def test_resume_costs_o1(dataset_path, id_backend, monkeypatch):
    ordered = []
    real_call = EpochOrder.__call__

    def counting(self, positions):
        ordered.append(np.size(positions))
        return real_call(self, positions)

    monkeypatch.setattr(plan_module.EpochOrder, "__call__", counting)
    pipe = make(dataset_path, augment="eval")
    pipe.load_state_dict({"seed": 0, "epoch": 5, "position": N - 5})
    got = torch.cat(collect(pipe)).numpy()
    pipe.close()
    # only the 5 remaining positions were ever mapped and decoded: no replay of the epoch
    assert len(got) == 5
    assert sum(ordered) == 5
    assert [c[0] for c in id_backend.CALLS] == [0, 1]
    assert np.array_equal(got, EpochOrder(N, 0, 5)(np.arange(N - 5, N)))


def test_state_counts_delivered_not_prefetched(dataset_path):
    pipe = make(dataset_path, prefetch=4)
    it = iter(pipe)
    next(it)
    time.sleep(0.2)  # let the producer run ahead
    assert pipe.state_dict()["position"] == 4
    assert pipe.stats.samples == 4 and pipe.stats.batches == 1
    pipe.close()


def test_a_yielded_batch_stays_valid_until_the_next_but_one_next(dataset_path):
    pipe = make(dataset_path, batch_size=2, prefetch=1, augment="eval")
    previous = None
    for batch in pipe:
        snapshot = {k: v.clone() for k, v in batch.items() if torch.is_tensor(v)}
        time.sleep(0.01)  # slow consumer: the producer is always waiting for a slot
        if previous is not None:
            prev_batch, prev_snapshot = previous
            for key, value in prev_snapshot.items():
                assert torch.equal(prev_batch[key], value), "a valid batch was overwritten"
        previous = (batch, snapshot)
    pipe.close()


def test_break_close_and_gc_leave_no_thread(dataset_path):
    pipe = make(dataset_path)
    for _ in pipe:
        break
    assert prefetch_threads() == []
    it = iter(pipe)
    next(it)
    assert prefetch_threads()
    del it
    gc.collect()
    assert prefetch_threads() == []
    with make(dataset_path) as other:
        it = iter(other)
        next(it)
    assert prefetch_threads() == []
    pipe.close()
    with pytest.raises(RuntimeError, match="closed"):
        iter(pipe)


def test_backend_errors_reach_the_consumer_in_order(dataset_path, id_backend, monkeypatch):
    real_read = id_backend.IdBackend.read

    def failing(self, iteration, ids, out):
        if iteration == 3:
            raise OSError("disk on fire")
        return real_read(self, iteration, ids, out)

    monkeypatch.setattr(id_backend.IdBackend, "read", failing)
    pipe = make(dataset_path)
    seen = 0
    with pytest.raises(OSError, match="disk on fire"):
        for _ in pipe:
            seen += 1
    assert seen == 3
    assert prefetch_threads() == []
    pipe.close()


def test_bad_arguments_are_explained(dataset_path):
    with pytest.raises(ValueError, match="not in dataset"):
        make(dataset_path, fields=("image", "caption"))
    with pytest.raises(ValueError, match="augment"):
        make(dataset_path, augment="test")
    with pytest.raises(ValueError, match="unknown backend"):
        make(dataset_path, backend="tpu")
    with pytest.raises(ValueError, match="rank"):
        make(dataset_path, rank=2, world_size=2)


def test_a_new_pass_reuses_the_slots_of_the_last(dataset_path):
    """A pass over a short epoch would spend much of its time faulting in fresh slot pages
    (docs/views.md, "Speed"): the next pass writes into the previous pass's slots, even while
    the old batches are still referenced (their contract ended)."""
    with make(dataset_path, batch_size=4, prefetch=2) as pipe:
        first = list(pipe)  # references keep every slot of the first pass alive
        second = list(pipe)
        ptrs = [{b["image"].data_ptr() for b in batches} for batches in (first, second)]
        assert len(ptrs[0]) == 4  # prefetch + 2 slots
        assert ptrs[1] == ptrs[0]


def test_a_batch_held_across_passes_stays_valid_until_the_next_but_one_next(dataset_path):
    with make(dataset_path, batch_size=4, prefetch=2) as pipe:
        it = iter(pipe)
        slots = set()
        for _ in range(4):
            held = next(it)
            slots.add(held["image"].data_ptr())
        snapshot = held["image"].clone()
        it.close()  # the loop breaks: the next pass reuses this pass's slots
        pipe.set_epoch(1)  # another order: a reused slot would show other samples
        it = iter(pipe)
        reused = {next(it)["image"].data_ptr()}  # the batch held before this next() stays
        time.sleep(0.3)  # valid until the one after it; the producer fills every slot it may
        assert torch.equal(held["image"], snapshot), "a valid batch was overwritten"
        reused |= {batch["image"].data_ptr() for batch in it}
        assert reused == slots  # the new pass ran in the old pass's slots
