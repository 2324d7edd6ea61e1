"""Kind `table` (chute/readers/kinds/_kind_table.py): only ShardWriter(tables=...) writes one. Its
round trip, range checks and damaged files are in the kind contract (test_kind_contract.py)."""

from __future__ import annotations

import numpy as np
import pytest

from chute.convert import ShardWriter


def _write(path, table):
    with ShardWriter(path, {"x": "int64"}, tables={"emb": table}, shard_size=16) as w:
        for i in range(10):
            w.write({"x": i % len(table)})
    return path


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
