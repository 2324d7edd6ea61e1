"""The manifest carries its own checksum, which `chute verify` checks (issue 26 item 12): an
ndarray field's dtype edited in chute.json read the same bytes as other numbers and verify
passed. Manifests written before the checksum still open and verify, with a warning."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chute.cli import main
from chute.convert._writer import ShardWriter
from chute.readers import open_dataset, verify_dataset
from chute.readers.format._manifest import MANIFEST, MANIFEST_CHECKSUM


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "d.chute"
    with ShardWriter(path, fields={"x": "ndarray", "label": "int64"}) as w:
        for i in range(4):
            w.write({"x": np.full((2, 3), i, np.float32), "label": i})
    return path


def _edit(path, change) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    change(manifest)
    (path / MANIFEST).write_text(json.dumps(manifest, indent=1))


def test_the_writer_adds_the_checksum_and_verify_passes(dataset, capsys):
    assert len(json.loads((dataset / MANIFEST).read_text())[MANIFEST_CHECKSUM]) == 16
    assert main(["verify", str(dataset), "--no-progress"]) == 0


def test_verify_fails_on_an_edited_ndarray_dtype(dataset, capsys):
    _edit(dataset, lambda m: m["fields"]["x"].update(dtype="int32"))
    np.testing.assert_array_equal(open_dataset(dataset)[1]["x"].shape, (2, 3))  # still opens
    capsys.readouterr()
    assert main(["verify", str(dataset), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert str(dataset / MANIFEST) in err and "checksum" in err


def test_verify_fails_on_a_swapped_shard_order(tmp_path):
    path = tmp_path / "d.chute"
    with ShardWriter(path, fields={"label": "int64", "x": "ndarray"}, shard_size=200) as w:
        for i in range(4):
            w.write({"label": i, "x": np.full(40, i, np.float32)})
    _edit(path, lambda m: m["shards"].reverse())
    assert any("checksum" in p for p in verify_dataset(path))


def test_a_manifest_without_the_checksum_verifies_with_a_warning(dataset):
    _edit(dataset, lambda m: m.pop(MANIFEST_CHECKSUM))
    with pytest.warns(UserWarning, match="no checksum of its own"):
        assert verify_dataset(dataset) == []
    assert len(open_dataset(dataset)) == 4


def test_a_malformed_checksum_is_a_format_error(dataset):
    from chute.errors import FormatError

    _edit(dataset, lambda m: m.update({MANIFEST_CHECKSUM: 7}))
    with pytest.raises(FormatError, match=MANIFEST_CHECKSUM):
        open_dataset(dataset)
