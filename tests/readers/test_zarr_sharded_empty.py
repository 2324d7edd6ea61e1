"""Sharded zarr v3 arrays (the sharding_indexed codec) whose shard index records inner chunks
as empty: zarr reads them as the fill value, as it does an absent chunk file. Unless the array
was opened with missing_chunks="fill", chute fails their rows, naming the array, the shard
file and the rows, and `chute verify` lists them (docs/latents.md, "Missing chunks")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chute.cli import main
from chute.errors import FormatError
from chute.readers import open_dataset

zarr = pytest.importorskip("zarr")

FILL = -1.5  # not 0, so a row read as the fill value cannot pass for data
VALUES = np.arange(12 * 3 * 4, dtype=np.float32).reshape(12, 3, 4)


def _store(path, *, shape=(12, 3, 4), chunks=(1, 3, 4), shards=(4, 3, 4), skip=(), dense=True,
           values=None):
    """Array "x" written region by region (`chunks` rows at a time), leaving out the regions
    (row slice, *other slices) in `skip`: their inner chunks stay empty in the shard index."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    array = group.create_array("x", shape=shape, dtype=np.float32, chunks=chunks,
                               shards=shards, fill_value=FILL,
                               config={"write_empty_chunks": dense})
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) if values is None \
        else values
    if not skip:
        array[...] = values
        return path, values
    written = np.full(shape, FILL, np.float32)
    for start in range(0, shape[0], chunks[0]):
        for col in range(0, shape[2], chunks[2]):
            region = (slice(start, start + chunks[0]), slice(None), slice(col, col + chunks[2]))
            if any(region[0] == s[0] and region[2] == s[-1] for s in skip):
                continue
            array[region] = values[region]
            written[region] = values[region]
    return path, written


def test_an_empty_inner_chunk_fails_its_rows_unless_fill_is_asked_for(tmp_path):
    path, written = _store(tmp_path / "x.zarr", skip=[(slice(5, 6), slice(0, 4))])
    assert (path / "x" / "c" / "1" / "0" / "0").exists()  # the shard is there, the chunk not
    ds = open_dataset(path)
    with pytest.raises(FormatError) as caught:
        ds.read("x", [4, 5])
    message = str(caught.value)
    assert "\n" not in message
    assert "x/c/1/0/0" in message and "array 'x'" in message and "row 5" in message
    assert "empty" in message and "missing_chunks='fill'" in message
    status = np.zeros(4, np.uint8)
    got = ds.reader("x").read(np.array([0, 5, 6, 11]), status=status)
    assert status.tolist() == [0, 1, 0, 0]
    np.testing.assert_array_equal(got[[0, 2, 3]], VALUES[[0, 6, 11]])
    sparse = open_dataset(path, missing_chunks="fill")
    np.testing.assert_array_equal(sparse.read("x", np.arange(12)), written)
    assert (written[5] == FILL).all()


def test_inner_chunks_split_across_other_dimensions(tmp_path):
    # inner chunks of 2 rows x 2 columns: rows 4-5 lose their columns 2-3 only
    path, written = _store(tmp_path / "x.zarr", chunks=(2, 3, 2),
                           skip=[(slice(4, 6), slice(2, 4))])
    ds = open_dataset(path)
    status = np.zeros(12, np.uint8)
    ds.reader("x").read(np.arange(12), status=status)
    assert np.flatnonzero(status).tolist() == [4, 5]
    with pytest.raises(FormatError, match=r"rows 4-5"):
        ds.read("x", [5])
    np.testing.assert_array_equal(open_dataset(path, missing_chunks="fill").read(
        "x", np.arange(12)), written)


def test_inner_chunks_outside_the_array_are_not_missing(tmp_path):
    # 5 columns in shards of 4: the second shard's inner chunk of columns 6-7 lies outside
    # the array, and the last shard's rows 12-15 too; zarr never writes them
    values = np.arange(13 * 3 * 5, dtype=np.float32).reshape(13, 3, 5)
    path, _ = _store(tmp_path / "x.zarr", shape=(13, 3, 5), chunks=(2, 3, 2),
                     shards=(4, 3, 4), values=values)
    np.testing.assert_array_equal(open_dataset(path).read("x", np.arange(13)), values)
    assert main(["verify", str(path), "--no-progress"]) == 0


def test_zarrs_default_skips_a_chunk_equal_to_the_fill_value(tmp_path):
    values = VALUES.copy()
    values[7] = FILL  # zarr's write_empty_chunks=False leaves this chunk out of its shard
    path, _ = _store(tmp_path / "x.zarr", dense=False, values=values)
    with pytest.raises(FormatError, match=r"row 7 .*missing_chunks='fill'"):
        open_dataset(path).read("x", [7])
    np.testing.assert_array_equal(open_dataset(path, missing_chunks="fill").read(
        "x", np.arange(12)), values)


def test_verify_lists_empty_inner_chunks(tmp_path, capsys):
    path, _ = _store(tmp_path / "x.zarr", skip=[(slice(5, 6), slice(0, 4)),
                                                (slice(9, 10), slice(0, 4))])
    assert main(["verify", str(path), "--no-progress", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1, problems  # listed as empty, not as rows that do not decode
    assert "array 'x'" in problems[0] and "2 chunk(s) recorded empty" in problems[0]
    assert "rows 5, 9" in problems[0] and "--missing-chunks fill" in problems[0]
    assert main(["verify", str(path), "--no-progress", "--missing-chunks", "fill"]) == 0


def test_eval_leaves_the_rows_of_an_empty_inner_chunk_out(tmp_path):
    from chute import Pipeline

    path, _ = _store(tmp_path / "x.zarr", skip=[(slice(5, 6), slice(0, 4))])
    with pytest.warns(RuntimeWarning, match="left out"), \
            Pipeline(str(path), 4, fields=("x",), device="cpu", augment="eval",
                     order="sequential") as pipe:
        seen = []
        for batch in pipe:
            ids = batch["index"].numpy()
            np.testing.assert_array_equal(batch["x"].numpy(), VALUES[ids])
            seen += ids.tolist()
        assert pipe.stats.skipped == [5]
    assert seen == [i for i in range(12) if i != 5]


def test_an_index_at_the_start_of_the_shard(tmp_path):
    from zarr.codecs import ShardingCodec

    group = zarr.open_group(str(tmp_path / "x.zarr"), mode="w", zarr_format=3)
    array = group.create_array("x", shape=VALUES.shape, dtype=np.float32, chunks=(4, 3, 4),
                               serializer=ShardingCodec(chunk_shape=(1, 3, 4),
                                                        index_location="start"),
                               compressors=None, fill_value=FILL)
    array[:5] = VALUES[:5]
    array[6:] = VALUES[6:]
    ds = open_dataset(tmp_path / "x.zarr")
    with pytest.raises(FormatError, match=r"row 5 of array 'x'.*recorded empty"):
        ds.read("x", [5])
    np.testing.assert_array_equal(ds.read("x", [4, 6]), VALUES[[4, 6]])
    got = open_dataset(tmp_path / "x.zarr", missing_chunks="fill").read("x", [5])
    assert (got == FILL).all()


def test_a_shard_compressed_whole_is_refused_unless_fill_is_asked_for(tmp_path):
    # a compressor after the sharding codec: the index is not at either end of the file
    from zarr.codecs import ShardingCodec

    group = zarr.open_group(str(tmp_path / "x.zarr"), mode="w", zarr_format=3)
    with pytest.warns(UserWarning):  # zarr's own: partial reads disabled
        array = group.create_array("x", shape=VALUES.shape, dtype=np.float32,
                                   chunks=(4, 3, 4), fill_value=FILL,
                                   serializer=ShardingCodec(chunk_shape=(1, 3, 4)))
        array[:5] = VALUES[:5]
        array[6:] = VALUES[6:]
    with pytest.warns(UserWarning):
        with pytest.raises(FormatError, match=r"array 'x'.*sharded with codecs.*"
                                              r"missing_chunks='fill'"):
            open_dataset(tmp_path / "x.zarr").read("x", [4])
        got = open_dataset(tmp_path / "x.zarr", missing_chunks="fill").read("x", [4, 5])
    np.testing.assert_array_equal(got[0], VALUES[4])
    assert (got[1] == FILL).all()
