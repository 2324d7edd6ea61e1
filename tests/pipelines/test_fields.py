"""Fields other than images through the Pipeline: ndarray latents next to decoded images,
latents-only datasets (no decoder), ragged arrays, and substitution across fields."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chute.convert import ShardWriter
from chute.pipelines import ArrayOptions, ImageOptions, Pipeline
from tests.pipelines._pipeline_data import latent_of, write_dataset

N = 37


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("fields") / "mixed", n=N, latent_shape=(4, 8, 8),
                         corrupt=(5,))


def _epoch(pipe):
    # sample 5 is corrupt: the warning about its substitute is expected
    with pytest.warns(RuntimeWarning, match="sample 5 "):
        return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
            for b in pipe]


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_latents_arrive_next_to_images_for_the_same_sample(mixed, augment):
    fields = {"image": ImageOptions(size=16, backend="cpu"), "latent": None, "label": None}
    with Pipeline(mixed, 8, fields=fields, device="cpu", augment=augment) as pipe:
        batches = _epoch(pipe)
    seen = []
    for batch in batches:
        latent = batch["latent"]
        assert latent.dtype == torch.float16 and latent.shape[1:] == (4, 8, 8)
        assert batch["image"].shape[1:] == (3, 16, 16)
        for k, i in enumerate(batch["index"].tolist()):
            assert torch.equal(latent[k], torch.from_numpy(latent_of(i)))
            assert batch["label"][k] == 1000 + i
        seen += batch["index"].tolist()
    assert len(seen) == (N // 8) * 8 if augment == "train" else N
    if augment == "eval":  # sample 5 is corrupt: its substitute brings its own latent
        assert 5 not in seen and sorted(set(seen) | {5}) == list(range(N))


def test_a_latents_only_dataset_streams_without_a_decoder(tmp_path):
    path = write_dataset(tmp_path / "lat", n=N, latent_shape=(2, 3), images=False, meta=False)
    with Pipeline(path, 5, augment="eval", device="cpu") as pipe:
        assert pipe.fields == ("label", "latent")  # no image: every non-JSON field
        assert pipe.backend is None and pipe.stats.backend == ""
    with Pipeline(path, 5, augment="eval", device="cpu", fields=("latent",)) as pipe:
        ids, rows = [], []
        for batch in pipe:
            ids += batch["index"].tolist()
            rows += list(batch["latent"].clone())  # slots are reused after two batches
    assert sorted(ids) == list(range(N))
    for i, row in zip(ids, rows, strict=True):
        assert torch.equal(row, torch.from_numpy(latent_of(i, (2, 3))))


def test_ragged_arrays_are_padded_per_batch_with_lengths(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((int(rng.integers(1, 7)), 2)).astype(np.float32)
              for _ in range(N)]
    with ShardWriter(tmp_path / "r", {"seq": {"kind": "ndarray", "ragged": True}}) as w:
        for a in arrays:
            w.write({"seq": a})
    with Pipeline(tmp_path / "r", 6, augment="eval", device="cpu") as pipe:
        for batch in pipe:
            ids = batch["index"].tolist()
            lengths = batch["seq_lengths"].tolist()
            assert batch["seq"].shape[1] == max(lengths) and batch["seq"].is_contiguous()
            for k, i in enumerate(ids):
                assert lengths[k] == len(arrays[i])
                assert torch.equal(batch["seq"][k, :lengths[k]], torch.from_numpy(arrays[i]))
                assert not batch["seq"][k, lengths[k]:].any()


def test_image_field_without_size_columns_is_explained(tmp_path):
    with ShardWriter(tmp_path / "x", {"image": {"kind": "bytes", "media": "image"}}) as w:
        w.write({"image": b"\xff\xd8"})
    with pytest.raises(ValueError, match=r"no \['height', 'width'\] column"):
        Pipeline(tmp_path / "x", 1, fields={"image": ImageOptions(backend="cpu")}, device="cpu")


def test_a_corrupt_shortest_ragged_sample_gets_a_longer_substitute(tmp_path):
    arrays = [np.full((2 + i % 6, 3), i, np.float32) for i in range(30)]
    arrays[7] = np.full((1, 3), 7, np.float32)  # the shortest sample, and the corrupt one
    with ShardWriter(tmp_path / "r", {"seq": {"kind": "ndarray", "ragged": True,
                                              "compression": "zstd"}}) as w:
        for a in arrays:
            w.write({"seq": a})
    from chute.readers import open_dataset

    records = open_dataset(tmp_path / "r").reader("seq").records
    with open(records.paths[0], "r+b") as f:  # garble sample 7's compressed bytes
        f.seek(int(records.pointers[7]) + 4)
        f.write(b"\xff" * 6)
    with pytest.warns(RuntimeWarning, match="sample 7 "):
        # train: eval would leave sample 7 out rather than substitute it
        with Pipeline(tmp_path / "r", 1, augment="train", device="cpu") as pipe:
            rows = {int(b["index"][0]): (b["seq"].clone(), int(b["seq_lengths"][0]))
                    for b in pipe}
    assert 7 not in rows and len(rows) == 29
    for i, (seq, length) in rows.items():
        assert length == len(arrays[i]) and torch.equal(seq[0, :length],
                                                         torch.from_numpy(arrays[i]))


def test_latents_are_cast_on_the_device_when_asked(tmp_path):
    path = write_dataset(tmp_path / "lat", n=N, latent_shape=(2, 3), images=False, meta=False)
    with Pipeline(path, 5, augment="eval", device="cpu",
                  fields={"latent": ArrayOptions(dtype="bfloat16")}) as pipe:
        for batch in pipe:
            assert batch["latent"].dtype == torch.bfloat16
            for k, i in enumerate(batch["index"].tolist()):
                want = torch.from_numpy(latent_of(i, (2, 3))).to(torch.bfloat16)
                assert torch.equal(batch["latent"][k], want)
