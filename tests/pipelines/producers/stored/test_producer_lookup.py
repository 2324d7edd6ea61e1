"""Tables looked up through an index field (chute/pipelines/producers/stored/_lookup.py), through
the Pipeline on zarr groups: exact values, exact resume, DDP partition and named errors."""

from __future__ import annotations

import numpy as np
import pytest

from chute.pipelines import ArrayOptions, Lookup, Pipeline
from tests.readers._zarr_stores import latents_values, open_latents, write_store

pytest.importorskip("zarr")

S, V = 90, 12
VALUES = latents_values(S, V, seed=3)
NAMES = ("base_frames", "clip_emb")
FIELDS = {"base_frames": None, "clip_emb": Lookup("segment_to_video")}


def _check(batch) -> None:
    ids = batch["index"].numpy()
    np.testing.assert_array_equal(batch["base_frames"].numpy(), VALUES["base_frames"][ids])
    np.testing.assert_array_equal(batch["clip_emb"].numpy(),
                                  VALUES["clip_emb"][VALUES["segment_to_video"][ids]])


@pytest.mark.parametrize("layout", [(2, 1, "blosc"), (2, 64, "none"), (3, 1, "zstd"),
                                    (3, 64, "blosc")], ids=lambda p: "v{}-chunk{}-{}".format(*p))
def test_pipeline_values_exact(tmp_path, layout):
    fmt, chunk, codec = layout
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=chunk, codec=codec)
    with Pipeline(open_latents(store), 16, fields=FIELDS, device="cpu", augment="eval") as pipe:
        seen = []
        for batch in pipe:
            assert batch["base_frames"].shape[1:] == VALUES["base_frames"].shape[1:]
            assert batch["clip_emb"].shape[1:] == VALUES["clip_emb"].shape[1:]
            _check(batch)
            seen.extend(batch["index"].tolist())
    assert sorted(seen) == list(range(S))


def test_resume_mid_epoch_exact(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES, chunk=8)
    with Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu", seed=4) as pipe:
        full = [b["index"].clone() for b in pipe]
    with Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu", seed=4) as pipe:
        it = iter(pipe)
        for _ in range(3):
            next(it)
        state = pipe.state_dict()
    with Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu", seed=4) as pipe:
        pipe.load_state_dict(state)
        rest = []
        for batch in pipe:
            _check(batch)
            rest.append(batch["index"].clone())
    assert [r.tolist() for r in rest] == [f.tolist() for f in full[3:]]


@pytest.mark.slow
def test_two_gloo_ranks_disjoint(tmp_path):
    import torch.multiprocessing as mp

    from tests.pipelines._ddp_lookup_worker import run

    store = write_store(tmp_path / "x.zarr", VALUES, chunk=4)
    mp.spawn(run, args=(2, str(store), str(tmp_path)), nprocs=2, join=True)
    parts = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    a, b = (set(p["ids"].tolist()) for p in parts)
    assert not a & b and a | b == set(range(S))
    for part in parts:
        np.testing.assert_array_equal(part["frames"], VALUES["base_frames"][part["ids"]])
        np.testing.assert_array_equal(
            part["emb"], VALUES["clip_emb"][VALUES["segment_to_video"][part["ids"]]])


def _store_with_index(tmp_path, index):
    values = dict(VALUES, segment_to_video=np.asarray(index, np.int32))
    return write_store(tmp_path / "x.zarr", values)


@pytest.mark.parametrize("bad", [-1, V])
def test_index_out_of_range_named(tmp_path, bad):
    index = VALUES["segment_to_video"].copy()
    index[17] = bad
    store = _store_with_index(tmp_path, index)
    with pytest.raises(ValueError, match=rf"'segment_to_video'.*{bad} at sample 17.*'clip_emb'"):
        Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu")


def test_index_of_another_length_named(tmp_path):
    store = _store_with_index(tmp_path, VALUES["segment_to_video"][:-1])
    with pytest.raises(ValueError, match=r"index field 'segment_to_video'.*89"):
        Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu")


def test_table_without_lookup_named(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES)
    with pytest.raises(ValueError, match=r"'clip_emb'.*is a table.*Lookup\(index_field\)"):
        Pipeline(open_latents(store), 8, fields=NAMES, device="cpu")


def test_bad_lookup_arguments_named(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES)
    # the round-2 lookups= keyword's own check (raised before its DeprecationWarning); it goes
    # away with that keyword
    with pytest.raises(ValueError, match="not requested"):
        Pipeline(open_latents(store), 8, fields=("base_frames",),
                 lookups={"clip_emb": "segment_to_video"}, device="cpu")
    with pytest.raises(ValueError, match="index field 'base_frames'"):
        Pipeline(open_latents(store), 8,
                 fields={"base_frames": None, "clip_emb": Lookup("base_frames")},
                 device="cpu")
    with pytest.raises(ValueError, match="is an ndarray field: Lookup does not apply"):
        Pipeline(open_latents(store), 8, fields={"base_frames": Lookup("segment_to_video"),
                                                 "clip_emb": Lookup("segment_to_video")},
                 device="cpu")
    with pytest.raises(ValueError, match=r"not in dataset"):
        Pipeline(open_latents(store), 8, fields=("base_frames", "missing"), device="cpu")


def test_corrupt_table_chunk_left_out_of_eval_and_counted(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec="zstd")
    row = int(VALUES["segment_to_video"][0])
    (store / "clip_emb" / "c" / str(row) / "0").write_bytes(b"garbage")
    bad = set(np.flatnonzero(VALUES["segment_to_video"] == row).tolist())
    delivered = []
    with pytest.warns(RuntimeWarning, match="left out"), \
            Pipeline(open_latents(store), 8, fields=FIELDS, device="cpu", augment="eval") as pipe:
        for batch in pipe:
            delivered += batch["index"].tolist()
            _check(batch)
        assert pipe.stats.decode_errors == len(bad) and set(pipe.stats.skipped) == bad
    n = len(VALUES["segment_to_video"])
    assert sorted(delivered) == sorted(set(range(n)) - bad)  # each other sample once


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_device_casts_of_per_sample_and_table_fields(tmp_path, dtype):
    import torch

    store = write_store(tmp_path / "x.zarr", VALUES, chunk=8)
    fields = {"base_frames": ArrayOptions(dtype=dtype),
              "clip_emb": Lookup("segment_to_video", dtype=getattr(torch, dtype))}
    with Pipeline(open_latents(store), 16, fields=fields, device="cpu", augment="eval") as pipe:
        for batch in pipe:
            ids = batch["index"].numpy()
            want = torch.from_numpy(VALUES["base_frames"][ids]).to(getattr(torch, dtype))
            assert batch["base_frames"].dtype == want.dtype
            assert torch.equal(batch["base_frames"], want)
            emb = VALUES["clip_emb"][VALUES["segment_to_video"][ids]]
            assert torch.equal(batch["clip_emb"], torch.from_numpy(emb).to(want.dtype))


@pytest.mark.parametrize("dtype", ["int8", "float8", "uint8"])
def test_a_cast_the_device_cannot_take_names_the_array(tmp_path, dtype):
    store = write_store(tmp_path / "x.zarr", VALUES, chunk=8)
    with pytest.raises(ValueError, match=rf"field 'base_frames' of .*x\.zarr.*{dtype}"):
        Pipeline(open_latents(store), 16,
                 fields={**FIELDS, "base_frames": ArrayOptions(dtype=dtype)}, device="cpu")
