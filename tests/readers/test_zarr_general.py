"""Zarr groups beyond the latents layout (issue 14): truncated or empty chunks of every codec
are named, never stale bytes; big-endian arrays deliver native values; arrays of strings or
objects do not stop the group from opening; broken metadata is a FormatError naming the
store."""

from __future__ import annotations

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import open_dataset

zarr = pytest.importorskip("zarr")

S = 12
VALUES = np.random.default_rng(3).standard_normal((S, 3, 4)).astype(np.float32)


def _store(path, *, fmt=3, compressors=None, shards=None, dtype=np.float32, chunk=1):
    group = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    array = group.create_array("x", shape=VALUES.shape, dtype=dtype, chunks=(chunk, 3, 4),
                               shards=shards, compressors=compressors)
    array[...] = VALUES.astype(dtype)
    return path


def _chunk(path, fmt, k):
    return path / "x" / ("c/{}/0/0" if fmt == 3 else "{}.0.0").format(k)


def _compressor(codec, fmt):
    import numcodecs
    from zarr.codecs import BloscCodec, GzipCodec

    if fmt == 2:
        return {"blosc": numcodecs.Blosc(cname="zstd"), "gzip": numcodecs.GZip()}[codec]
    return {"blosc": BloscCodec(cname="zstd"), "gzip": GzipCodec()}[codec]


@pytest.mark.parametrize("fmt,codec", [(2, "blosc"), (3, "blosc"), (2, "gzip")])
@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_chunk_is_named_not_stale_bytes(tmp_path, fmt, codec, damage):
    """blosc read past a short chunk into the thread's reused read buffer (the chunk read
    before it), and numcodecs' GZip left the destination untouched for an empty chunk."""
    path = _store(tmp_path / "x.zarr", fmt=fmt, compressors=[_compressor(codec, fmt)])
    ds = open_dataset(path)
    ids = np.arange(S)
    np.testing.assert_array_equal(ds.read("x", ids), VALUES)  # fills the threads' buffers
    chunk = _chunk(path, fmt, 5)
    data = chunk.read_bytes()
    chunk.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"")
    for _ in range(4):
        out = np.full((S, 3, 4), 7, np.float32)
        with pytest.raises(FormatError, match="chunk 5 of array 'x'"):
            ds.read("x", ids, out)
        status = np.zeros(S, np.uint8)
        got = ds.reader("x").read(ids, status=status)
        assert status.tolist() == [0] * 5 + [1] + [0] * 6
        np.testing.assert_array_equal(np.delete(got, 5, axis=0), np.delete(VALUES, 5, axis=0))


@pytest.mark.parametrize("damage,ids", [("empty", [7]), ("empty", [4, 5, 6, 7]), ("cut", [7])],
                         ids=["empty-read-in-part", "empty-read-whole", "cut"])
def test_a_damaged_shard_is_named_not_fill_values(tmp_path, damage, ids):
    """zarr reads an empty shard, or a chunk its index places past the end of the file, as
    never written (fill values): a file that is there but short is corrupt."""
    path = _store(tmp_path / "x.zarr", shards=(4, 3, 4))
    shard = path / "x" / "c/1/0/0"
    data = shard.read_bytes()
    index = len(data) - 4 * VALUES[0].nbytes  # the shard's index, at its end
    # "cut": chunks 1-3 of the shard gone, the index kept: chunk 3 (row 7) lies past the end
    shard.write_bytes(b"" if damage == "empty" else data[:VALUES[0].nbytes] + data[-index:])
    ds = open_dataset(path)
    with pytest.raises(FormatError, match="x/c/1/0/0"):
        ds.read("x", ids)
    status = np.zeros(len(ids) + 2, np.uint8)
    got = ds.reader("x").read(np.array([0, *ids, 9]), status=status)
    assert status.tolist() == [0] + [1] * len(ids) + [0]
    np.testing.assert_array_equal(got[[0, -1]], VALUES[[0, 9]])


@pytest.mark.parametrize("fmt,chunk", [(2, 1), (2, 5), (3, 1)])
def test_big_endian_arrays_deliver_native_values(tmp_path, fmt, chunk):
    from chute import Pipeline

    if fmt == 3:
        from zarr.codecs import BytesCodec

        group = zarr.open_group(str(tmp_path / "x.zarr"), mode="w", zarr_format=3)
        array = group.create_array("x", shape=VALUES.shape, dtype=np.float32,
                                   chunks=(chunk, 3, 4), serializer=BytesCodec(endian="big"))
        array[...] = VALUES
        path = tmp_path / "x.zarr"
    else:
        path = _store(tmp_path / "x.zarr", fmt=2, dtype=">f4", chunk=chunk)
    ds = open_dataset(path)
    got = ds.read("x", np.arange(S))
    assert got.dtype == np.float32 and got.dtype.isnative
    np.testing.assert_array_equal(got, VALUES)
    seen = np.zeros(S, bool)
    for batch in Pipeline(str(path), 5, fields=("x",), device="cpu", on_error="raise",
                          drop_last=False):
        index = batch["index"].numpy()
        np.testing.assert_array_equal(batch["x"].numpy(), VALUES[index])
        seen[index] = True
    assert seen.all()


def test_arrays_of_strings_do_not_stop_the_group(tmp_path):
    from chute.convert import convert_zarr

    path = _store(tmp_path / "x.zarr")
    group = zarr.open_group(str(path), mode="a")
    captions = group.create_array("caption", shape=(S,), dtype=str, chunks=(4,))
    captions[...] = np.array([f"a cat {i}" for i in range(S)], dtype=object)
    ds = open_dataset(path)
    assert ds.fields == {"x": "ndarray"} and "caption" in ds.unreadable
    np.testing.assert_array_equal(ds.read("x", [3]), VALUES[[3]])
    with pytest.raises(KeyError, match="'caption'.*not numbers"):
        ds.reader("caption")
    with pytest.raises(FormatError, match="caption"):
        convert_zarr(path, tmp_path / "x.chute")


@pytest.mark.parametrize("document", ["zarr.json", "x/zarr.json"])
def test_broken_metadata_is_named(tmp_path, document):
    path = _store(tmp_path / "x.zarr")
    text = (path / document).read_text()
    (path / document).write_text(text[:len(text) // 2])
    with pytest.raises(FormatError, match=f"{path}.*corrupt"):
        open_dataset(path).read("x", [0])
