"""A ragged field's `rows.npy` lengths are bounded by the records that hold them (issue 26 item
12): with zstd frames that declare no content size, a length of 2^33 rows passed open and the
first batch tried to allocate it. Now a FormatError naming the column."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

from chute.convert._writer import ShardWriter
from chute.errors import FormatError
from chute.readers import open_dataset
from chute.readers.kinds import _kind_ndarray


class _NoContentSize:
    """python-zstandard whose frames declare no content size (as other writers' may not)."""

    def __getattr__(self, name):
        return getattr(zstandard, name)

    @staticmethod
    def ZstdCompressor(**options):  # noqa: N802  (zstandard's name)
        return zstandard.ZstdCompressor(**options, write_content_size=False)


@pytest.mark.parametrize("claimed", [1 << 33, 1 << 20])
def test_a_length_the_record_cannot_hold_is_a_format_error(tmp_path, monkeypatch, claimed):
    monkeypatch.setattr(_kind_ndarray, "_zstd", lambda: _NoContentSize())
    path = tmp_path / "d.chute"
    with ShardWriter(path, {"x": {"kind": "ndarray", "ragged": True, "compression": "zstd",
                                  "dtype": "float32", "shape": [None, 4]}}) as w:
        for n in (3, 5, 2):
            w.write({"x": np.ones((n, 4), np.float32)})
    assert open_dataset(path).read("x", [1]).shape == (1, 5, 4)
    rows_npy = next(path.glob("*/x.rows.npy"))
    rows = np.load(rows_npy)
    rows[1] = claimed
    np.save(rows_npy, rows)
    with pytest.raises(FormatError, match="rows.npy: sample 1 has length"):
        open_dataset(path)
