"""Kind `table` (chute/readers/_kind_table.py): written once by ShardWriter(tables=...),
memory-mapped, range-checked, and a missing or mismatched table file is named."""

from __future__ import annotations

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import SampleIndexError, ShardWriter, open_dataset


def _write(path, table):
    with ShardWriter(path, {"x": "int64"}, tables={"emb": table}, shard_size=16) as w:
        for i in range(10):
            w.write({"x": i % len(table)})
    return path


def test_round_trip(tmp_path):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ds = open_dataset(_write(tmp_path / "d", table))
    assert ds.fields["emb"] == "table"
    reader = ds.reader("emb")
    assert reader.num_rows == 4 and reader.sample_shape == (3,)
    np.testing.assert_array_equal(reader.read(np.array([3, 0, 3])), table[[3, 0, 3]])
    with pytest.raises(SampleIndexError, match="'emb'"):
        reader.read(np.array([4]))


def test_missing_or_replaced_table_named(tmp_path):
    path = _write(tmp_path / "d", np.zeros((4, 3), np.float16))
    np.save(path / "emb.table.npy", np.zeros((5, 3), np.float16))
    with pytest.raises(FormatError, match=r"emb.table.npy.*manifest says"):
        open_dataset(path)
    (path / "emb.table.npy").unlink()
    with pytest.raises(FormatError, match=r"emb.table.npy: missing"):
        open_dataset(path)


def test_table_is_not_a_per_sample_field(tmp_path):
    with pytest.raises(ValueError, match="tables="):
        ShardWriter(tmp_path / "d", {"emb": {"kind": "table"}})
    with pytest.raises(ValueError, match="numeric array"):
        _write(tmp_path / "e", np.array(["a"]))
    assert not (tmp_path / "e").exists() or not any((tmp_path / "e").iterdir())
    with pytest.raises(ValueError, match="cannot name a file"):
        ShardWriter(tmp_path / "f", {"x": "int64"}, tables={"../up": np.zeros(2)})
    with pytest.raises(ValueError, match="both fields and tables"):
        ShardWriter(tmp_path / "g", {"x": "int64"}, tables={"x": np.zeros(2)})
