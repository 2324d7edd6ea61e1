"""Zarr groups read directly (chute/readers/zarr/_zarr.py): exact values for v2 and v3 stores, every
chunking and codec, fork safety, and named errors for corrupt chunks."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import SampleIndexError, open_dataset
from tests.readers._zarr_stores import latents_values, open_latents, write_store

pytest.importorskip("zarr")

S, V = 150, 20
VALUES = latents_values(S, V)
LAYOUTS = [  # (zarr_format, chunk, codec, shard)
    (2, 1, "zstd", None), (2, 64, "blosc", None), (2, 64, "none", None),
    (3, 1, "zstd", None), (3, 1, "none", None), (3, 64, "blosc", None), (3, 8, "zstd", 64),
]


@pytest.fixture(params=["shim", "ctypes", "zstandard"])
def read_path(request, monkeypatch):
    """Each way chunks are read: the C shim (a batch of one-row chunks in one call per
    thread), libzstd per chunk from Python, python-zstandard (no libzstd found)."""
    from chute.readers.zarr import _zarr_chunks
    from chute.readers.zarr._chunk_native import chunk_reader_status

    if request.param == "shim" and not chunk_reader_status().available:
        pytest.skip(f"chunk reader shim unavailable: {chunk_reader_status().reason}")
    if request.param != "shim":
        monkeypatch.setattr(_zarr_chunks, "_native_batch", lambda p: False)
    if request.param == "zstandard":
        monkeypatch.setattr(_zarr_chunks, "decoder", lambda: None)
    return request.param


@pytest.fixture(scope="module", params=LAYOUTS, ids=lambda p: "v{}-chunk{}-{}-shard{}".format(*p))
def store(request, tmp_path_factory):
    fmt, chunk, codec, shard = request.param
    path = tmp_path_factory.mktemp("zarr") / "x.zarr"
    return write_store(path, VALUES, zarr_format=fmt, chunk=chunk, codec=codec, shard=shard)


def test_fields_and_kinds(store):
    ds = open_latents(store)
    assert len(ds) == S
    assert ds.fields == {"base_frames": "ndarray", "clip_emb": "table",
                         "segment_to_video": "scalar"}
    assert ds.reader("base_frames").sample_shape == VALUES["base_frames"].shape[1:]
    assert ds.reader("clip_emb").num_rows == V


def test_read_values_exact(store, read_path):
    ds = open_latents(store)
    ids = np.random.default_rng(1).integers(0, S, 70)  # repeats and many chunks
    np.testing.assert_array_equal(ds.read("base_frames", ids), VALUES["base_frames"][ids])
    out = np.empty((len(ids), *VALUES["base_frames"].shape[1:]), np.float16)
    assert ds.read("base_frames", ids, out) is out
    np.testing.assert_array_equal(out, VALUES["base_frames"][ids])
    rows = np.array([V - 1, 0, 3])
    np.testing.assert_array_equal(ds.read("clip_emb", rows), VALUES["clip_emb"][rows])
    np.testing.assert_array_equal(ds.column("segment_to_video"), VALUES["segment_to_video"])
    sample = ds[-1]
    assert set(sample) == {"base_frames", "segment_to_video"}
    np.testing.assert_array_equal(sample["base_frames"], VALUES["base_frames"][-1])


def test_pickled_copy_reads_the_same(store):
    ds = open_latents(store)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.fingerprint == ds.fingerprint and copy.url == ds.url
    np.testing.assert_array_equal(copy.read("base_frames", [7, 9]), VALUES["base_frames"][[7, 9]])


def _child_read(ds, queue):
    queue.put(ds.read("base_frames", np.arange(S)).tobytes())


@pytest.mark.slow
def test_forked_child_after_parent_read(tmp_path):
    """The parent has zarr's event loop running; a forked child reads without deadlock."""
    ds = open_latents(write_store(tmp_path / "x.zarr", VALUES, chunk=4))
    ds.read("base_frames", np.arange(10))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_read, args=(ds, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert got == VALUES["base_frames"].tobytes()


def test_out_of_range_rows_named(tmp_path):
    ds = open_latents(write_store(tmp_path / "x.zarr", VALUES))
    with pytest.raises(SampleIndexError, match="clip_emb"):
        ds.reader("clip_emb").read(np.array([V]))
    with pytest.raises(SampleIndexError, match="out of range"):
        ds.read("base_frames", [S])
    with pytest.raises(KeyError, match="no array 'nope'"):
        ds.read("nope", [0])
    with pytest.raises(KeyError, match="1-D per-sample"):
        ds.column("base_frames")


# the fast lane runs this and the next test on zstd chunks of zarr v3 only (docs/testing.md);
# the slow lane runs every variant
@pytest.mark.parametrize("codec", ["zstd", pytest.param("none", marks=pytest.mark.slow)])
def test_corrupt_chunk_is_named_or_counted(tmp_path, read_path, codec):
    path = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec=codec)
    (path / "base_frames" / "c" / "5" / "0" / "0" / "0").write_bytes(b"not zstd at all")
    (path / "base_frames" / "c" / "7" / "0" / "0" / "0").unlink()  # lost: not fill values
    ds = open_latents(path)
    with pytest.raises(FormatError, match="base_frames"):
        ds.read("base_frames", [4, 5, 6])
    with pytest.raises(FormatError, match="chunk 7 of array 'base_frames'.* is missing"):
        ds.read("base_frames", [4, 7])
    status = np.zeros(5, np.uint8)
    out = ds.reader("base_frames").read(np.array([4, 5, 6, 7, 4]), status=status)
    assert status.tolist() == [0, 1, 0, 1, 0]
    np.testing.assert_array_equal(out[[0, 2, 4]], VALUES["base_frames"][[4, 6, 4]])
    assert not out[[1, 3]].any()
    # an array written sparse on purpose: the absent chunk is zarr's fill value, when asked
    sparse = open_latents(path, missing_chunks={"base_frames": "fill"})
    status[...] = 0
    out = sparse.reader("base_frames").read(np.array([4, 5, 6, 7, 4]), status=status)
    assert status.tolist() == [0, 1, 0, 0, 0] and not out[3].any()


def test_a_table_is_read_whole_once_and_a_corrupt_chunk_fails_only_its_rows(tmp_path):
    path = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec="zstd")
    reader = open_latents(path).reader("clip_emb")
    np.testing.assert_array_equal(reader.read(np.array([3, 0, 3])), VALUES["clip_emb"][[3, 0, 3]])
    assert reader._whole[1] is not None  # kept decoded: later batches decompress nothing
    (path / "clip_emb" / "c" / "4" / "0").write_bytes(b"corrupt")
    reader = open_latents(path).reader("clip_emb")
    status = np.zeros(3, np.uint8)
    out = reader.read(np.array([3, 4, 5]), status=status)
    assert status.tolist() == [0, 1, 0] and reader._whole[1] is None
    np.testing.assert_array_equal(out[[0, 2]], VALUES["clip_emb"][[3, 5]])
    with pytest.raises(FormatError, match="clip_emb"):
        reader.read(np.array([4]))


def test_not_a_group_and_empty_group(tmp_path):
    import zarr

    zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    with pytest.raises(FormatError, match="holds no arrays"):
        open_dataset(tmp_path / "empty.zarr")


@pytest.mark.parametrize("fmt", [pytest.param(2, marks=pytest.mark.slow), 3])
@pytest.mark.parametrize("delta", [-2, 2], ids=["short", "long"])
def test_a_valid_zstd_frame_of_the_wrong_size_is_named(tmp_path, fmt, delta, read_path):
    import zstandard

    path = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=1, codec="zstd")
    chunk = (path / "base_frames" / "c" / "5" / "0" / "0" / "0") if fmt == 3 else \
        (path / "base_frames" / "5.0.0.0")
    size = VALUES["base_frames"][0].nbytes + delta
    chunk.write_bytes(zstandard.ZstdCompressor().compress(bytes(size)))
    ds = open_latents(path)
    status = np.zeros(3, np.uint8)
    out = ds.reader("base_frames").read(np.array([4, 5, 6]), status=status)
    assert status.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(out[[0, 2]], VALUES["base_frames"][[4, 6]])
    with pytest.raises(FormatError, match="base_frames"):
        ds.read("base_frames", [5])


def test_opening_does_not_walk_chunk_folders(tmp_path, monkeypatch):
    import os

    from chute.readers.zarr import _zarr

    path = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec="zstd")
    before = open_latents(path).fingerprint
    seen = []
    real_walk = os.walk

    def walk(top, *args, **kwargs):
        for folder, dirs, files in real_walk(top, *args, **kwargs):
            seen.append(os.path.relpath(folder, path))
            yield folder, dirs, files

    monkeypatch.setattr(_zarr.os, "walk", walk)
    assert open_latents(path).fingerprint == before
    assert seen and not [f for f in seen if f.split(os.sep)[-1] == "c" or "/c/" in f]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_bare_zarr_array_is_named_as_such_not_as_a_damaged_store(tmp_path, zarr_format):
    # a v3 array was "corrupt or edited by hand: restore the store", a v2 one "not a chute
    # dataset (no chute.json)": the store is fine, it is an array where a group is read
    import zarr

    path = tmp_path / "latent.zarr"
    zarr.create_array(path, data=np.zeros((4, 2), np.float32), chunks=(2, 2),
                      zarr_format=zarr_format)
    with pytest.raises(FormatError, match=r"is a zarr array, not a group; .*open_group"):
        open_dataset(path)
