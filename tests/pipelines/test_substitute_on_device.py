"""Substitution for a producer that writes its output on the device (`Output.on_device`, as
`nvimgcodec`, `dali` and `video-dali` do on a GPU): its `fill` for a substitute gets the same
kind of buffer as its `read`, a torch tensor on the Pipeline's device (docs/design.md, "Plans
and producers"), never host scratch, and the substitute's row lands in the batch. On the CPU
the device is the CPU; the same test runs on CUDA where there is a GPU."""

from __future__ import annotations

import warnings

import pytest
import torch

import chute.pipelines.producers._registry as producer_registry
from chute.pipelines import ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset

N, FAILING = 12, 5


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("on-device") / "ds.chute", n=N)


@pytest.fixture
def handed(monkeypatch):
    monkeypatch.setitem(producer_registry.PRODUCERS, "test-on-device",
                        "tests.pipelines._device_backend")
    from tests.pipelines import _device_backend

    _device_backend.HANDED.clear()
    return _device_backend.HANDED


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_substitute_is_filled_into_a_device_tensor(dataset_path, handed, device):
    image = ImageOptions(size=4, dtype="float32", backend="test-on-device",
                         backend_options={"fail": [FAILING]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the substitution is reported
        # train substitutes (eval leaves a failed sample out: the test below)
        with Pipeline(dataset_path, 4, fields={"image": image}, device=device, order="sequential",
                      augment="train") as pipe:
            batches = [{k: v.cpu() for k, v in b.items()} for b in pipe]
    want = torch.device(device).type
    assert len(handed) == N // 4 + 1  # every batch's read, and one fill for the substitute
    assert {(kind, torch.device(dev).type) for kind, dev in handed} == {("Tensor", want)}
    index = torch.cat([b["index"] for b in batches])
    assert FAILING not in index.tolist() and len(index) == N
    for b in batches:  # each image row holds its index, the substitute's too
        assert torch.equal(b["image"].amax(dim=(1, 2, 3)), b["index"].float())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_eval_leaves_a_failed_row_out_of_a_device_tensor(dataset_path, handed, device):
    # the kept rows move up inside the device tensor; no substitute is read
    image = ImageOptions(size=4, dtype="float32", backend="test-on-device",
                         backend_options={"fail": [FAILING]})
    with pytest.warns(RuntimeWarning, match="left out"):
        with Pipeline(dataset_path, 4, fields={"image": image}, device=device, order="sequential",
                      augment="eval") as pipe:
            batches = [{k: v.cpu() for k, v in b.items()} for b in pipe]
            assert pipe.stats.skipped == [FAILING]
    assert len(handed) == N // 4  # every batch's read, no fill
    assert [len(b["index"]) for b in batches] == [4, 3, 4]
    index = torch.cat([b["index"] for b in batches])
    assert index.tolist() == [i for i in range(N) if i != FAILING]
    for b in batches:  # each image row holds its own index
        assert b["image"].shape[1:] == (3, 4, 4)
        assert torch.equal(b["image"].amax(dim=(1, 2, 3)), b["index"].float())
