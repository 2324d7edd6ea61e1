"""examples/batch_transform.py: a transform= hook on real decoded batches."""

import importlib.util
from pathlib import Path

import pytest
import torch

from chute.pipelines import ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "batch_transform.py"


def test_the_example_transform_mixes_real_batches(tmp_path):
    spec = importlib.util.spec_from_file_location("batch_transform", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    dataset = write_dataset(tmp_path / "ds.chute", n=16)
    image = ImageOptions(size=16, backend="cpu", dtype="float32", backend_options={"threads": 1})
    kw = dict(fields={"image": image, "label": None}, device="cpu", rank=0, world_size=1, seed=2)
    with Pipeline(dataset, 8, **kw) as plain, \
            Pipeline(dataset, 8, transform=example.JitterAndMixup(brightness=0.0), **kw) as mixed:
        a, b = next(iter(plain)), next(iter(mixed))
        lam = b["mix_weight"].view(-1, 1, 1, 1)
        expected = lam * a["image"] + (1 - lam) * a["image"].flip(0)
        assert torch.allclose(b["image"], expected, atol=1e-5)
        assert torch.equal(a["index"], b["index"])
