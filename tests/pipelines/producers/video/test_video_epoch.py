"""The video producer's pipelined epoch reader: the next batch's clips are queued before the
current batch is awaited, and batches, their clips and resume stay exactly those of plain
in-order reads."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pytest
import torch

pytest.importorskip("av")

from chute.errors import ChuteError  # noqa: E402
from chute.pipelines import Buckets, Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers._contract import StoredFieldProducer  # noqa: E402
from chute.pipelines.producers.video._cpu import VideoProducer  # noqa: E402
from chute.pipelines.producers.video._epoch import VideoEpoch  # noqa: E402
from tests.pipelines.producers.video.test_producer_video import write_videos  # noqa: E402

OPTS = VideoOptions(num_frames=3, frame_interval=2, size=(16, 24), dtype="uint8")
BUCKETS = {"16x16": {2: (1.0, 2)}, "32x32": {3: (1.0, 1)}}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return write_videos(tmp_path_factory.mktemp("vid"))


def _batches(pipe, limit=None):
    out = []
    for batch in pipe:
        out.append({k: v.clone() for k, v in batch.items()})
        if limit is not None and len(out) == limit:
            break
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), key


@pytest.mark.parametrize("kw", [dict(batch_size=2, fields={"video": OPTS}),
                                dict(batch_size=None, batching=Buckets(BUCKETS), fields={
                                    "video": VideoOptions(frame_interval=2, dtype="uint8")})])
def test_pipelined_batches_equal_in_order_reads(videos, monkeypatch, kw):
    def pipe():
        return Pipeline(videos, device="cpu", seed=3, **kw)

    with pipe() as p:
        pipelined = _batches(p)
    with monkeypatch.context() as m:
        # the plain reader: each batch decoded when it is asked for, nothing queued ahead
        m.setattr(VideoProducer, "open_epoch", StoredFieldProducer.open_epoch)
        with pipe() as p:
            plain = _batches(p)
    assert len(pipelined) > 2
    _assert_same(pipelined, plain)


def test_resume_after_k_batches_continues_with_the_same_clips(videos):
    def pipe():
        return Pipeline(videos, 2, fields={"video": OPTS}, device="cpu", seed=7)

    with pipe() as p:
        whole = _batches(p)
    for k in (1, 2):
        with pipe() as p:
            _batches(p, limit=k)  # the reader has queued batch k + 1 by now; it is dropped
            state = p.state_dict()
        with pipe() as p:
            p.load_state_dict(state)
            _assert_same(_batches(p), whole[k:])


@dataclass
class _Request:
    iteration: int
    ids: np.ndarray


class _Plan:
    def __init__(self, batches: int):
        self.batches = batches

    def __len__(self):
        return self.batches

    def request(self, iteration):
        if iteration >= self.batches:
            raise StopIteration
        return _Request(iteration, np.array([2 * iteration, 2 * iteration + 1]))


class _Producer:
    """Records the order of submits and collects; futures are completed by hand."""

    name = "video"

    def __init__(self):
        self.events: list[tuple[str, int]] = []
        self.futures: dict[int, list[Future]] = {}

    def submit(self, request):
        self.events.append(("submit", request.iteration))
        self.futures[request.iteration] = [Future() for _ in request.ids]
        return self.futures[request.iteration]

    def collect(self, request, jobs, out):
        self.events.append(("collect", request.iteration))
        assert jobs is self.futures[request.iteration]
        return np.zeros(len(jobs), np.uint8)


def test_the_next_batch_is_queued_before_the_current_one_is_collected():
    producer, plan = _Producer(), _Plan(3)
    epoch = VideoEpoch(producer, plan, 0)
    for i in range(3):
        epoch.read(plan.request(i), {})
    assert producer.events == [("submit", 0), ("submit", 1), ("collect", 0),
                               ("submit", 2), ("collect", 1), ("collect", 2)]


def test_a_resumed_reader_starts_at_its_first_iteration():
    producer, plan = _Producer(), _Plan(4)
    epoch = VideoEpoch(producer, plan, 2)
    epoch.read(plan.request(2), {})
    assert producer.events == [("submit", 2), ("submit", 3), ("collect", 2)]


def test_out_of_order_a_different_batch_and_after_close_raise():
    producer, plan = _Producer(), _Plan(3)
    epoch = VideoEpoch(producer, plan, 0)
    with pytest.raises(ChuteError, match="expected 0"):
        epoch.read(plan.request(1), {})
    with pytest.raises(ChuteError, match="differs"):
        epoch.read(_Request(0, np.array([5, 6])), {})
    epoch = VideoEpoch(producer, plan, 0)
    epoch.read(plan.request(0), {})
    queued = producer.futures[1]
    epoch.close()
    epoch.close()  # idempotent
    assert all(f.cancelled() for f in queued)
    with pytest.raises(ChuteError, match="after close"):
        epoch.read(plan.request(1), {})

