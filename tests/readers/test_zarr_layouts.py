"""Zarr stores as users lay them out (issue 27, items 8-11; chute/readers/zarr/_zarr.py): arrays
in subgroups are fields named by their path (read directly and converted), the sample array is
named rather than guessed, an absent chunk file fails its rows unless the user asks for fill
values, and a chunk shared by several batches is decoded once."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chute.cli import main
from chute.convert import convert_zarr
from chute.errors import FormatError
from chute.pipelines import Lookup, Pipeline
from chute.readers import open_dataset, verify_dataset
from tests.readers._zarr_stores import latents_values, open_latents, write_store

zarr = pytest.importorskip("zarr")

S, V = 40, 6
VALUES = latents_values(S, V, seed=7)
NESTED = {"latents/base_frames": VALUES["base_frames"], "text/clip_emb": VALUES["clip_emb"],
          "text/segment_to_video": VALUES["segment_to_video"]}


def _nested(tmp_path, fmt: int = 3, chunk: int = 4):
    store = write_store(tmp_path / "x.zarr", NESTED, zarr_format=fmt, chunk=chunk)
    group = zarr.open_group(str(store), mode="r+")
    group.attrs["model"] = "vae-f8"
    group["latents"].attrs["scale"] = 0.18215
    return store


@pytest.mark.parametrize("fmt", [2, 3])
def test_arrays_in_subgroups_are_fields_named_by_their_path(tmp_path, fmt):
    ds = open_dataset(_nested(tmp_path, fmt), sample_array="latents/base_frames")
    assert ds.fields == {"latents/base_frames": "ndarray", "text/clip_emb": "table",
                         "text/segment_to_video": "scalar"}
    ids = np.array([3, 0, 39, 3])
    np.testing.assert_array_equal(ds.read("latents/base_frames", ids), VALUES["base_frames"][ids])
    with Pipeline(ds, 8, fields={"latents/base_frames": None,
                                 "text/clip_emb": Lookup("text/segment_to_video")},
                  device="cpu", augment="eval") as pipe:
        seen = 0
        for batch in pipe:
            got = batch["index"].numpy()
            seen += len(got)
            np.testing.assert_array_equal(batch["latents/base_frames"].numpy(),
                                          VALUES["base_frames"][got])
            np.testing.assert_array_equal(
                batch["text/clip_emb"].numpy(),
                VALUES["clip_emb"][VALUES["segment_to_video"][got]])
        assert seen == S


def test_convert_keeps_subgroup_arrays_and_attributes(tmp_path, capsys):
    store = _nested(tmp_path)
    assert main(["convert", "zarr", str(store), str(tmp_path / "c.chute"),
                 "--sample-array", "latents/base_frames"]) == 0
    out = capsys.readouterr().out
    assert "array latents/base_frames -> field latents.base_frames" in out
    ds = open_dataset(tmp_path / "c.chute")
    assert ds.fields == {"latents.base_frames": "ndarray", "text.segment_to_video": "scalar",
                         "text.clip_emb": "table"}
    np.testing.assert_array_equal(ds.read("latents.base_frames", np.arange(S)),
                                  VALUES["base_frames"])
    np.testing.assert_array_equal(ds.column("text.segment_to_video"), VALUES["segment_to_video"])
    np.testing.assert_array_equal(ds.read("text.clip_emb", np.arange(V)), VALUES["clip_emb"])
    source = ds.manifest["zarr"]
    assert source["arrays"]["text.clip_emb"] == "text/clip_emb"
    assert source["attributes"][""] == {"model": "vae-f8"}
    assert source["attributes"]["latents"] == {"scale": 0.18215}
    assert verify_dataset(tmp_path / "c.chute") == []


def test_subgroup_names_that_would_clash_are_refused(tmp_path):
    store = write_store(tmp_path / "x.zarr", {"a/b": np.zeros((4, 2), np.float32),
                                              "a.b": np.ones((4, 2), np.float32)})
    with pytest.raises(FormatError, match="would all become field 'a.b'"):
        convert_zarr(store, tmp_path / "c.chute")


def test_a_table_longer_than_the_samples_is_not_the_sample_axis(tmp_path, capsys):
    # every video embedded, fewer segments: the largest first dimension is the table's
    values = latents_values(12, 30, seed=2)
    store = write_store(tmp_path / "x.zarr", values, chunk=4)
    with pytest.raises(FormatError, match=r"first dimensions differ \(clip_emb 30, "
                       r"base_frames 12.*sample_array=NAME.*--sample-array NAME") as caught:
        open_dataset(store)
    assert "\n" not in str(caught.value)
    assert main(["convert", "zarr", str(store), str(tmp_path / "c.chute")]) == 1
    assert "--sample-array" in capsys.readouterr().err
    ds = open_latents(store)
    assert len(ds) == 12 and ds.fields["clip_emb"] == "table"
    assert ds.fields["base_frames"] == "ndarray"
    with pytest.raises(FormatError, match="sample_array 'nope' is not an array"):
        open_dataset(store, sample_array="nope")
    assert convert_zarr(store, tmp_path / "c.chute", sample_array="base_frames") == 12


def test_one_first_dimension_needs_no_choice(tmp_path):
    store = write_store(tmp_path / "x.zarr", {"latent": VALUES["base_frames"],
                                              "label": VALUES["segment_to_video"]})
    assert len(open_dataset(store)) == S


def _lose_chunk(store, fmt: int, array: str = "base_frames", chunk: int = 2):
    folder = store / array
    path = folder / f"{chunk}.0.0.0" if fmt == 2 else folder / "c" / str(chunk) / "0" / "0" / "0"
    path.unlink()
    return path


@pytest.mark.parametrize("layout", [(2, 1, None), (3, 4, None), (3, 4, 8)],
                         ids=["v2-chunk1", "v3-chunk4", "v3-sharded"])
def test_a_missing_chunk_fails_its_rows_unless_fill_is_asked_for(tmp_path, layout):
    fmt, chunk, shard = layout
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=chunk, shard=shard)
    lost = 8 // (shard or chunk)  # the chunk (or shard) holding row 8
    _lose_chunk(store, fmt, chunk=lost)
    ds = open_latents(store)
    with pytest.raises(FormatError, match=f"chunk {lost} of array 'base_frames'.* is missing"):
        ds.read("base_frames", [0, 8])
    status = np.zeros(3, np.uint8)
    out = ds.reader("base_frames").read(np.array([0, 8, 39]), status=status)
    assert status.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(out[[0, 2]], VALUES["base_frames"][[0, 39]])
    with pytest.raises(Exception, match="could not be decoded"), \
            Pipeline(ds, 8, fields=("base_frames",), device="cpu", on_error="raise",
                     order="sequential") as pipe:
        for _ in pipe:
            pass
    with pytest.warns(RuntimeWarning, match="replaced"), \
            Pipeline(ds, 8, fields=("base_frames",), device="cpu", on_error="skip",
                     order="sequential") as pipe:
        rows = (shard or chunk)
        bad = set(range(lost * rows, (lost + 1) * rows))
        for batch in pipe:
            ids = batch["index"].numpy()
            assert not bad & set(ids.tolist())
            np.testing.assert_array_equal(batch["base_frames"].numpy(), VALUES["base_frames"][ids])
    sparse = open_latents(store, missing_chunks="fill")
    np.testing.assert_array_equal(sparse.read("base_frames", [8]), 0)


@pytest.mark.parametrize("layout", [(2, 1, None), (3, 4, None), (3, 4, 8)],
                         ids=["v2-chunk1", "v3-chunk4", "v3-sharded"])
def test_verify_names_the_array_of_a_deleted_chunk_file(tmp_path, capsys, layout):
    fmt, chunk, shard = layout
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=chunk, shard=shard)
    assert main(["verify", str(store), "--no-progress"]) == 0
    capsys.readouterr()
    _lose_chunk(store, fmt, chunk=1)
    assert main(["verify", str(store), "--no-progress", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1
    assert "array 'base_frames' has 1 chunk file(s) missing (chunks 1;" in problems[0]
    assert main(["verify", str(store), "--no-progress", "--missing-chunks", "fill"]) == 0


def test_a_store_written_with_zarrs_defaults_names_the_option(tmp_path):
    # zarr skips chunks equal to the fill value: a sorted index starting with 0s
    values = {"latent": VALUES["base_frames"], "video": np.repeat(np.arange(8), 5)}
    store = write_store(tmp_path / "x.zarr", values, chunk=5, dense=False)
    with pytest.raises(FormatError, match="missing_chunks='fill'"):
        open_dataset(store).column("video")
    np.testing.assert_array_equal(open_dataset(store, missing_chunks="fill").column("video"),
                                  values["video"])
    with pytest.raises(ValueError, match=r"names arrays \['nope'\]"):
        open_dataset(store, missing_chunks={"nope": "fill"})


def test_a_chunk_shared_by_several_batches_is_decoded_once(tmp_path, monkeypatch):
    from chute.readers.zarr import _zarr_chunks

    store = write_store(tmp_path / "x.zarr", VALUES, chunk=16)
    loads = []
    load = _zarr_chunks._load
    monkeypatch.setattr(_zarr_chunks, "_load",
                        lambda p, chunk, *a: loads.append((p.field, chunk)) or load(p, chunk, *a))
    ds = open_latents(store)
    for lo in range(0, S, 4):  # sequential batches of 4 rows over 16-row chunks
        np.testing.assert_array_equal(ds.read("base_frames", np.arange(lo, lo + 4)),
                                      VALUES["base_frames"][lo:lo + 4])
    assert sorted(loads) == [("base_frames", c) for c in range(3)]
    assert ds.chunk_cache().decoded == 3
    loads.clear()
    uncached = open_latents(store, chunk_cache=0)
    for lo in range(0, S, 4):
        uncached.read("base_frames", np.arange(lo, lo + 4))
    assert len(loads) == S // 4  # each batch decodes its chunk again


def test_the_cache_keeps_at_most_its_bytes(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES, chunk=16)
    chunk_bytes = 16 * VALUES["base_frames"][0].nbytes
    ds = open_latents(store, chunk_cache=2 * chunk_bytes)
    ds.read("base_frames", np.arange(S))  # every row of each chunk: nothing left to keep
    cache = ds.chunk_cache()
    assert cache.decoded == 1  # only the last chunk, which the array fills half
    ds.read("base_frames", np.array([0, 16]))  # one row of each: the rest kept for later
    assert cache.decoded == 3 and cache._bytes <= 2 * chunk_bytes  # chunk 2 dropped
    assert [c for c in range(3) if cache.get("base_frames", c) is not None] == [0, 1]


def test_a_reference_reopens_the_group_with_its_options(tmp_path):
    import pickle

    from chute.readers import DatasetRef

    store = write_store(tmp_path / "x.zarr", VALUES)
    ds = open_latents(store, missing_chunks={"clip_emb": "fill"})
    ref = DatasetRef.of(ds)
    hash(ref)
    for copy in (ref.open(), pickle.loads(pickle.dumps(ds))):
        assert len(copy) == S and copy.fields == ds.fields
        assert copy.reader("clip_emb").fill_missing and not copy.reader("base_frames").fill_missing
