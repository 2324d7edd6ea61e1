"""Sizes a zarr store's metadata claims are bounded by what can exist (issue 26 item 12): a
300-byte `.zarray` claiming 2^62 rows kept `chute verify` running forever and made `chute info`
print "0 B"; 2^20 x 2^20 inner dimensions were a raw MemoryError. Each is a FormatError naming
the document; a store with fill-value chunks never written still opens."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chute.cli import main
from chute.errors import FormatError
from chute.readers import verify_dataset
from tests.readers._zarr_stores import latents_values, open_latents, write_store

pytest.importorskip("zarr")

S, V = 6, 2
VALUES = latents_values(S, V)


def _claim(store, fmt: int, shape=None, chunks=None):
    document = store / "base_frames" / (".zarray" if fmt == 2 else "zarr.json")
    meta = json.loads(document.read_text())
    if shape is not None:
        meta["shape"] = shape
    if chunks is not None:
        if fmt == 2:
            meta["chunks"] = chunks
        else:
            meta["chunk_grid"]["configuration"]["chunk_shape"] = chunks
    document.write_text(json.dumps(meta))
    return document


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_first_dimension_no_file_backs_is_a_format_error(tmp_path, fmt, capsys):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt)
    document = _claim(store, fmt, shape=[1 << 62, 3, 2, 4])
    with pytest.raises(FormatError, match="claims") as caught:
        open_latents(store)
    assert str(document) in str(caught.value)
    with pytest.raises(FormatError):
        verify_dataset(store)
    capsys.readouterr()
    assert main(["info", str(store)]) == 1
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("fmt", [2, 3])
def test_huge_inner_dimensions_are_a_format_error(tmp_path, fmt):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt)
    document = _claim(store, fmt, shape=[S, 1 << 20, 1 << 20], chunks=[1, 1 << 20, 1 << 20])
    with pytest.raises(FormatError, match="bytes decoded") as caught:
        open_latents(store)
    assert str(document) in str(caught.value)


def test_unwritten_fill_chunks_open_and_verify_when_told(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3)
    _claim(store, 3, shape=[5000, 3, 2, 4])  # chunks 6.. never written: fill values
    ds = open_latents(store, missing_chunks="fill")
    assert len(ds) == 5000
    np.testing.assert_array_equal(ds.read("base_frames", [4999])[0], 0)
    assert verify_dataset(store, missing_chunks="fill") == []
    problems = verify_dataset(store)  # by default absent chunks are reported, bounded
    assert len(problems) == 1 and "4994 chunk file(s) missing" in problems[0]


@pytest.mark.parametrize("fmt", [2, 3])
def test_chunks_of_zero_rows_are_a_format_error(tmp_path, fmt):
    """Found by tests/robustness/test_zarr_stores.py (issue 26 item 16): chunks of 0 rows
    opened, and reading a row raised a raw IndexError."""
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=2)
    document = _claim(store, fmt, chunks=[0, *VALUES["base_frames"].shape[1:]])
    with pytest.raises(FormatError, match="at least 1") as caught:
        open_latents(store)
    assert str(document) in str(caught.value)
