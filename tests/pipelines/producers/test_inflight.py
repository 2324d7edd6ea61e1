"""Several batches in flight (docs/pipeline.md, "Batches in flight"), the CPU twin of the GPU
path: the `nvimgcodec` backend on nvImageCodec's CPU-only decoder, whose decode call is made
to take L ms with the GIL released (what a GPU decode call does), read through its epoch
reader as the Pipeline reads it."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("nvidia.nvimgcodec")

import chute.pipelines.producers.image._nvimgcodec as nvimgcodec  # noqa: E402
from chute.pipelines import ImageSpec, create_producer  # noqa: E402
from chute.pipelines.producers._inflight import DecodeWorkers  # noqa: E402
from chute.pipelines.producers.image._nvimgcodec_config import (  # noqa: E402
    DecoderConfig,
    candidate_grid,
    decoder_config,
    make_decoder,
)
from chute.readers import open_dataset  # noqa: E402
from tests.pipelines._dali_data import write_jpeg_dataset  # noqa: E402
from tests.pipelines._plans import image_plan  # noqa: E402

BATCH = 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("inflight") / "ds.chute"
    return open_dataset(write_jpeg_dataset(path, n=48, sizes=(24, 48)))


class SlowCodec:
    """nvImageCodec whose decoders sleep `latency` s per batch (time.sleep releases the GIL, as
    a GPU decode call does) before decoding."""

    def __init__(self, latency: float = 0.0):
        from nvidia import nvimgcodec as real

        self.real, self.latency = real, latency
        self.calls = 0
        self.decoders = 0
        self.running = self.most_running = 0  # decode calls at once
        self.reused: list = []  # per call: the ids of the images= passed (None: fresh)
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def Decoder(self, **kwargs):  # noqa: N802 (nvImageCodec's spelling)
        decoder = self.real.Decoder(**kwargs)
        codec = self
        with self.lock:
            self.decoders += 1

        class Slow:
            def decode(self, streams, images=None, params=None, cuda_stream=0):
                with codec.lock:
                    codec.calls += 1
                    codec.reused.append(None if images is None else [id(i) for i in images])
                    codec.running += 1
                    codec.most_running = max(codec.most_running, codec.running)
                try:
                    time.sleep(codec.latency)
                    return decoder.decode(streams, images=images, params=params,
                                          cuda_stream=cuda_stream)
                finally:
                    with codec.lock:
                        codec.running -= 1

        return Slow()


def _producer(dataset, monkeypatch, codec, **options):
    monkeypatch.setattr(nvimgcodec, "import_nvimgcodec", lambda: codec)
    spec = ImageSpec("nvimgcodec", "image", dataset, BATCH, "cpu", options=options,
                     size=(16, 16), dtype="uint8", layout="NHWC")
    return create_producer(spec)


def _epoch(producer, plan):
    """Every batch of `plan` read in order, as the Pipeline's thread reads them."""
    reader = producer.open_epoch(plan, 0)
    try:
        outs = []
        for k in range(len(plan)):
            request = plan.request(k)
            out = np.zeros(producer.shapes(request)["image"], np.uint8)
            status = reader.read(request, {"image": out})
            outs.append((np.asarray(request.ids).copy(), status.copy(), out))
        return outs
    finally:
        reader.close()


@pytest.mark.slow
def test_k_decoders_give_k_over_l_batches_per_second_and_the_same_batches(dataset,
                                                                          monkeypatch):
    latency = 0.06
    plan = image_plan(dataset, (16, 16), batch_size=BATCH)  # 12 batches
    first = None
    for k in (1, 2, 3, 4):
        codec = SlowCodec(latency)
        producer = _producer(dataset, monkeypatch, codec, decoders=k, num_cpu_threads=1)
        try:
            _epoch(producer, plan)  # warm-up: pools, resample compiled
            rates = []
            for _ in range(3):  # the best of three: a busy machine only slows a pass down
                start = time.perf_counter()
                outs = _epoch(producer, plan)
                rates.append(len(plan) / (time.perf_counter() - start))
        finally:
            producer.close()
        assert codec.most_running == k  # K decode calls at once, never more
        # the decode calls bound it: at most K/L, and within 15% of it
        assert 0.85 * k / latency <= max(rates) <= 1.05 * k / latency, (k, rates)
        if first is None:
            first = outs
        for (ids, status, out), (ids1, status1, out1) in zip(outs, first, strict=True):
            np.testing.assert_array_equal(ids, ids1)  # in order
            np.testing.assert_array_equal(status, status1)
            np.testing.assert_array_equal(out, out1)  # identical for every K


def test_a_decode_failure_is_raised_at_its_batch_and_close_joins_every_worker(dataset,
                                                                            monkeypatch):
    plan = image_plan(dataset, (16, 16), batch_size=BATCH)
    producer = _producer(dataset, monkeypatch, SlowCodec(0.01), decoders=3)
    prepare = producer._prepare

    def failing_at_batch_3(worker, request):  # on a decode worker, whichever runs it
        if request.iteration == 3:
            raise RuntimeError("decoder failed at batch 3")
        return prepare(worker, request)

    monkeypatch.setattr(producer, "_prepare", failing_at_batch_3)
    reader = producer.open_epoch(plan, 0)
    read = []
    with pytest.raises(RuntimeError, match="decoder failed at batch 3"):
        for k in range(len(plan)):
            request = plan.request(k)
            reader.read(request, {"image": np.zeros(producer.shapes(request)["image"],
                                                    np.uint8)})
            read.append(k)
    assert read == [0, 1, 2]  # the batches before it were delivered
    reader.close()
    threads = producer.workers.threads
    assert len(threads) == 3 and all(t.is_alive() for t in threads)
    producer.close()
    assert not any(t.is_alive() for t in threads)


def test_ten_epochs_make_no_thread_decoder_or_image_after_the_first(dataset, monkeypatch):
    codec = SlowCodec()
    producer = _producer(dataset, monkeypatch, codec, decoders=2)
    try:
        before = set(threading.enumerate())
        first = _epoch(producer, image_plan(dataset, (16, 16), batch_size=BATCH, epoch=0))
        threads, decoders = set(threading.enumerate()), codec.decoders
        pools = [[id(i) for i in w.pool] for w in producer.workers.states]
        calls = codec.calls
        for epoch in range(1, 10):
            _epoch(producer, image_plan(dataset, (16, 16), batch_size=BATCH, epoch=epoch))
        assert set(threading.enumerate()) == threads == before  # workers made with the producer
        assert codec.decoders == decoders == 3  # two workers and the substitutes' decoder
        assert [[id(i) for i in w.pool] for w in producer.workers.states] == pools
        # every decode after each worker's first reuses that worker's images
        assert all(r is not None for r in codec.reused[calls:])
        again = _epoch(producer, image_plan(dataset, (16, 16), batch_size=BATCH, epoch=0))
    finally:
        producer.close()
    # reused images decode bit-identically to the first epoch's fresh ones
    for (_, _, a), (_, _, b) in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_reused_images_decode_bit_identically_to_fresh_ones(dataset):
    from nvidia import nvimgcodec as codec

    decoder = make_decoder(codec, DecoderConfig(), None, BATCH, (48, 48))
    params = codec.DecodeParams(apply_exif_orientation=False, color_spec=codec.ColorSpec.SRGB)
    ids = np.arange(8)
    data, offsets = dataset.gather(ids, "image")
    streams = [codec.CodeStream(data[offsets[k]:offsets[k + 1]]) for k in range(8)]
    pool = decoder.decode(streams[:4], params=params)
    fresh = [np.asarray(img.cpu()).copy() for img in decoder.decode(streams[4:], params=params)]
    reused = decoder.decode(streams[4:], images=pool, params=params)
    assert [id(i) for i in reused] == [id(i) for i in pool]
    for img, want in zip(reused, fresh, strict=True):
        np.testing.assert_array_equal(np.asarray(img.cpu()), want)


@pytest.mark.parametrize("config", candidate_grid(), ids=lambda c: repr(c.as_params()))
def test_every_candidate_configuration_is_accepted_by_the_cpu_only_decoder(dataset, config):
    from nvidia import nvimgcodec as codec

    assert decoder_config(config.as_params()) == config  # a stored decision builds it again
    decoder = make_decoder(codec, config, None, 256, (375, 500))
    assert "preallocate_batch_size=256" in config.options_string(256, (375, 500)) or \
        "hw" not in config.gpu_backends
    data, offsets = dataset.gather([0], "image")
    (img,) = decoder.decode([codec.CodeStream(data[offsets[0]:offsets[1]])])
    assert img is not None and img.shape[2] == 3


@pytest.mark.parametrize("options, match", [
    ({"decoders": 0}, "decoders must be a whole number from 1 to 16"),
    ({"decoders": True}, "decoders must be a whole number"),
    ({"gpu_backends": ["hw", "nvdec"]}, "gpu_backends must be a non-empty list"),
    ({"gpu_backends": []}, "gpu_backends must be a non-empty list"),
    ({"hw_load": 1.5}, r"hw_load must be a fraction in \(0, 1\]"),
    ({"hw_load": 0.5, "gpu_backends": "cuda"}, "leaves out; add 'hw' or drop hw_load"),
    ({"cuda_streams": -1}, "cuda_streams must be a whole number"),
    ({"cpu_fallback": "maybe"}, "cpu_fallback"),
])
def test_decoder_options_are_checked_when_the_backend_is_built(dataset, options, match):
    with pytest.raises(ValueError, match=match):
        create_producer(ImageSpec("nvimgcodec", "image", dataset, BATCH, "cpu",
                                  options=options, size=(16, 16)))


def test_decode_workers_deliver_in_submission_order_and_stop(dataset):
    seen = []

    def work(state, job):
        time.sleep(0.01 * (3 - job % 3))  # later jobs finish first
        seen.append(job)
        return job * 10 + state

    made = iter(range(3))
    workers = DecodeWorkers(3, lambda: next(made), work, name="test-workers")
    tickets = [workers.submit(j) for j in range(9)]
    assert [t.result() for t in tickets] == [j * 10 + j % 3 for j in range(9)]
    assert [t.worker for t in tickets] == [j % 3 for j in range(9)]
    assert sorted(seen) == list(range(9)) and seen != list(range(9))
    workers.close()
    assert not any(t.is_alive() for t in workers.threads)


def test_a_pass_that_fails_to_start_releases_its_batches_in_flight(dataset, monkeypatch):
    # the epoch readers opened before the failure hold decoded batches: left open, the next
    # pass would wait forever for their workers' buffers
    import chute.pipelines._run as run_module
    from chute import ImageOptions, Pipeline

    real, calls = run_module.Substitutor, []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # e.g. Ctrl-C while the pass starts
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "Substitutor", failing_once)
    fields = {"image": ImageOptions(size=16, backend="cpu", dtype="uint8"), "label": None}
    with Pipeline(dataset, BATCH, fields=fields, device="cpu") as pipe:
        with pytest.raises(KeyboardInterrupt):
            next(iter(pipe))
        done: list = []
        thread = threading.Thread(target=lambda: done.append(sum(1 for _ in pipe)),
                                  daemon=True)
        thread.start()
        thread.join(60)
        assert done == [len(pipe)], "the second pass hung on the first one's workers"


@pytest.mark.slow  # forks
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_closes_its_parents_pass_without_waiting_for_its_workers(
        dataset, monkeypatch):
    # the child of a process in mid-pass runs the pass's `finally` (its generator ends there
    # with "forked"): the batches still decoding belong to threads the child does not have
    producer = _producer(dataset, monkeypatch, SlowCodec(1.5), decoders=2)
    plan = image_plan(dataset, (16, 16), batch_size=BATCH)
    reader = producer.open_epoch(plan, 0)  # two batches decoding for 1.5 s
    pid = os.fork()
    if pid == 0:
        try:
            reader.close()
        finally:
            os._exit(0)
    deadline = time.monotonic() + 1.0  # before the decodes could end
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = None
    reader.close()
    producer.close()
    assert status == 0, "the child waited for its parent's decode workers"
