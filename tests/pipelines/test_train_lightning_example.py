"""CI runs examples/train_lightning.py: 3 Lightning epochs, each with every batch."""

import importlib.util
from pathlib import Path

import pytest

from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_lightning.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_lightning", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["pipeline", "dataloader"])
def test_every_lightning_epoch_gets_every_batch(tmp_path, loader, monkeypatch):
    # imported here: Lightning takes 3.5 s to import, which collecting the fast lane paid
    pytest.importorskip("pytorch_lightning", reason="pip install pytorch-lightning to run this")
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    dataset = write_dataset(tmp_path / "tiny.chute", n=60, sizes=(32, 40))
    counts = load_example().train(str(dataset), epochs=3, batch_size=8, image_size=16,
                                  loader=loader)
    assert counts == [60 // 8] * 3
