"""examples/ray_latents.py: latents computed in Ray `map_batches` from a chute image dataset
read with chute.ray, written back with chute.ray, read by a Pipeline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from chute.convert import ConvertOptions, convert_imagefolder
from chute.readers import open_dataset
from tests.ray._sources import image_folder

pytestmark = pytest.mark.slow  # Ray starts worker processes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_latents.py"


def test_latents_written_on_ray_match_the_encoder_and_stream_through_a_pipeline(
        tmp_path, ray_local):
    spec = importlib.util.spec_from_file_location("ray_latents", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    convert_imagefolder(image_folder(tmp_path / "src"), tmp_path / "images.chute",
                        ConvertOptions(shard_size="8KB", progress=False, workers=1))
    images = open_dataset(tmp_path / "images.chute")
    written = example.precompute(str(tmp_path / "images.chute"), str(tmp_path / "lat.chute"),
                                 size=32)
    assert len(written) == len(images) == 26
    encoder = example.Encoder(size=32)
    ids = [0, 7, 25]
    want = encoder({"image": [bytes(images[i]["image"]) for i in ids],
                    "label": [int(images[i]["label"]) for i in ids]})
    for k, i in enumerate(ids):
        assert int(written[i]["label"]) == int(images[i]["label"])
        assert written[i]["latent"].shape == (4, 4, 4) and written[i]["latent"].dtype == np.float16
        assert np.array_equal(written[i]["latent"], want["latent"][k])

    from chute import ArrayOptions, Pipeline

    with Pipeline(tmp_path / "lat.chute", 8, fields={"latent": ArrayOptions(dtype="float32"),
                                                     "label": None}, device="cpu",
                  rank=0, world_size=1) as pipe:
        batches = list(pipe)
    assert sum(len(b["label"]) for b in batches) == 24  # drop_last in training order
    assert tuple(batches[0]["latent"].shape) == (8, 4, 4, 4)
