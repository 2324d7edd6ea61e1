"""The Pipeline where a DataLoader is expected: batches unchanged, set_epoch forwarded."""

import gc

import pytest
import torch

from chute.pipelines import ImageOptions, Pipeline, PipelineDataset
from tests.pipelines._pipeline_data import write_dataset

N = 30


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("loader") / "ds.chute", n=N)


pytestmark = pytest.mark.usefixtures("ids_backend")


def make(path):
    image = ImageOptions(size=8, backend="test-ids", dtype="float32")
    return Pipeline(path, 4, fields={"image": image, "label": None, "meta": None}, device="cpu",
                    rank=0, world_size=1)


def epoch_ids(loader):
    return torch.cat([b["index"].clone() for b in loader]).tolist()


def test_as_dataloader_delivers_the_pipeline_batches(dataset_path):
    with make(dataset_path) as pipe, make(dataset_path) as reference:
        loader = pipe.as_dataloader()
        assert isinstance(loader, torch.utils.data.DataLoader)
        assert isinstance(loader.dataset, torch.utils.data.IterableDataset)
        assert len(loader) == len(pipe) == N // 4
        for epoch in (0, 1, 1):
            loader.sampler.set_epoch(epoch)  # as Lightning does
            reference.set_epoch(epoch)
            assert epoch_ids(loader) == epoch_ids(reference)
        batch = next(iter(loader))
        assert batch["image"].shape == (4, 3, 8, 8) and isinstance(batch["meta"], list)


def test_a_plain_dataloader_over_the_dataset_works(dataset_path):
    with make(dataset_path) as pipe:
        loader = torch.utils.data.DataLoader(PipelineDataset(pipe), batch_size=None)
        first, second = epoch_ids(loader), epoch_ids(loader)
        assert len(first) == len(second) == (N // 4) * 4 and first != second


def test_the_dataset_refuses_to_run_in_a_dataloader_worker(dataset_path, monkeypatch):
    # what a worker process sees (the real worker is the slow test below)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with make(dataset_path) as pipe, pytest.raises(RuntimeError, match="num_workers=0"):
        iter(PipelineDataset(pipe))


@pytest.mark.slow  # a worker process; torch then waits 5 s for it to stop (docs/testing.md)
def test_a_dataloader_worker_is_refused(dataset_path):
    with make(dataset_path) as pipe:
        workers = torch.utils.data.DataLoader(PipelineDataset(pipe), batch_size=None,
                                              num_workers=1)
        with pytest.raises(RuntimeError, match="num_workers=0") as caught:
            next(iter(workers))
        del caught, workers
        gc.collect()  # the worker stops here, not in whichever later test collects it
