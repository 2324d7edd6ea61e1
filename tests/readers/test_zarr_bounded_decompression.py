"""Chunk decompression is bounded by the chunk's size for every codec read directly, not only
zstd (issue 26 item 11): a small gzip (zlib, bz2, lzma) chunk inflating to 64 MiB allocated it
all before the size check. Now refused after at most one chunk's bytes, a FormatError naming
the chunk (a failed row under a status); good chunks of these codecs read as before."""

from __future__ import annotations

import bz2
import gzip
import lzma
import tracemalloc
import zlib

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import open_dataset, verify_dataset
from tests.readers._zarr_stores import latents_values

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

S = 4
VALUES = latents_values(S, 2)["base_frames"]
BOMB = 64 << 20
CODECS = {  # name -> (v2 compressor, compress(bytes))
    "gzip": (lambda: numcodecs.GZip(level=1), lambda b: gzip.compress(b, 1)),
    "zlib": (lambda: numcodecs.Zlib(level=1), lambda b: zlib.compress(b, 1)),
    "bz2": (lambda: numcodecs.BZ2(level=1), lambda b: bz2.compress(b, 1)),
    "lzma": (lambda: numcodecs.LZMA(), lzma.compress),
}


def _store(tmp_path, codec: str, zarr_format: int = 2):
    path = tmp_path / "x.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    if zarr_format == 2:
        options = {"compressors": [CODECS[codec][0]()]}
    else:
        options = {"compressors": [zarr.codecs.GzipCodec(level=1)]}
    array = group.create_array("x", shape=VALUES.shape, dtype=VALUES.dtype,
                               chunks=(1, *VALUES.shape[1:]), **options)
    array[...] = VALUES
    chunk = sorted(p for p in (path / "x").rglob("*") if p.is_file() and
                   p.name not in (".zarray", ".zattrs", "zarr.json"))[1]
    return path, chunk


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("codec,fmt", [(c, 2) for c in CODECS] + [("gzip", 3)])
def test_a_chunk_inflating_beyond_its_size_is_refused_without_its_output(tmp_path, codec, fmt):
    path, chunk = _store(tmp_path, codec, fmt)
    ds = open_dataset(path)
    np.testing.assert_array_equal(ds.read("x", np.arange(S)), VALUES)
    chunk.write_bytes(CODECS[codec][1](bytes(BOMB)))
    ds = open_dataset(path)
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match="chunk 1 ") as caught:
            ds.read("x", [1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert chunk.name in str(caught.value)
    assert peak < BOMB // 4, f"{peak} bytes allocated for a chunk of {VALUES[0].nbytes}"
    status = np.zeros(S, np.uint8)
    got = ds.reader("x").read(np.arange(S, dtype=np.int64), status=status)
    assert status.tolist() == [0, 1, 0, 0]
    np.testing.assert_array_equal(got[2:], VALUES[2:])
    assert any("1 row(s) do not decode (1)" in p for p in verify_dataset(path))


def test_a_truncated_gzip_chunk_is_refused(tmp_path):
    path, chunk = _store(tmp_path, "gzip")
    chunk.write_bytes(chunk.read_bytes()[:-5])
    with pytest.raises(FormatError, match="truncated|does not decode"):
        open_dataset(path).read("x", [1])
