"""Every path a manifest names stays inside the dataset folder (issue 11, defect 3): shard
names, field file stems, listed files and tables; `../x`, absolute paths and symlinks leading
out are a FormatError, and `chute meta update` never writes or deletes outside."""

import json
import os

import numpy as np
import pytest

from chute.cli import main
from chute.convert import ShardWriter
from chute.errors import FormatError
from chute.readers import open_dataset, verify_dataset


def _rewrite(root, change):
    manifest = json.loads((root / "chute.json").read_text())
    change(manifest)
    (root / "chute.json").write_text(json.dumps(manifest))


def _outside_copy(dataset_dir, name="evil"):
    """A copy of shard 0 in a sibling folder, reachable as `../evil` from the dataset."""
    manifest = json.loads((dataset_dir / "chute.json").read_text())
    first = dataset_dir / manifest["shards"][0]["name"]
    outside = dataset_dir.parent / name
    outside.mkdir()
    for f in first.iterdir():
        (outside / f.name).write_bytes(f.read_bytes())
    return outside


def _refused(root, match="outside the dataset|not a plain name"):
    """Both opening and verifying refuse the dataset."""
    with pytest.raises(FormatError, match=match):
        open_dataset(root)
    with pytest.raises(FormatError, match=match):
        verify_dataset(root)


@pytest.mark.parametrize("how", ["parent", "absolute", "nested"])
def test_shard_name_outside_is_refused(dataset_dir, how):
    outside = _outside_copy(dataset_dir)
    name = {"parent": "../evil", "absolute": str(outside), "nested": "00000/../../evil"}[how]
    _rewrite(dataset_dir, lambda m: m["shards"][0].update(name=name))
    _refused(dataset_dir)


def test_shard_folder_symlink_leading_out_is_refused(dataset_dir):
    manifest = json.loads((dataset_dir / "chute.json").read_text())
    name = manifest["shards"][0]["name"]
    outside = _outside_copy(dataset_dir)
    for f in (dataset_dir / name).iterdir():
        f.unlink()
    (dataset_dir / name).rmdir()
    (dataset_dir / name).symlink_to(outside)
    _refused(dataset_dir, "outside the dataset")


def test_file_symlink_leading_out_is_refused(dataset_dir):
    manifest = json.loads((dataset_dir / "chute.json").read_text())
    target = dataset_dir / manifest["shards"][0]["name"] / "label.npy"
    outside = dataset_dir.parent / "label.npy"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(FormatError, match="outside the dataset"):
        open_dataset(dataset_dir)


def test_symlink_inside_the_dataset_is_fine(dataset_dir):
    manifest = json.loads((dataset_dir / "chute.json").read_text())
    target = dataset_dir / manifest["shards"][0]["name"] / "label.npy"
    kept = dataset_dir / ".label0.npy"
    target.rename(kept)
    target.symlink_to(kept)
    assert len(open_dataset(dataset_dir)) == manifest["num_samples"]


@pytest.mark.parametrize("stem", ["../../evil/meta", "/tmp/meta", "a/meta"])
def test_field_file_stem_outside_is_refused(dataset_dir, stem):
    def change(m):
        m["fields"]["meta"]["file"] = stem

    _rewrite(dataset_dir, change)
    with pytest.raises(FormatError, match="outside the dataset|not a plain name"):
        open_dataset(dataset_dir)


@pytest.mark.parametrize("listed", ["../x.bin", "/etc/passwd"])
def test_listed_file_outside_is_refused(dataset_dir, listed):
    _rewrite(dataset_dir, lambda m: m["shards"][0]["files"].update(
        {listed: {"size": 1, "xxh3_64": "0"}}))
    _refused(dataset_dir)


def test_field_name_outside_is_refused(dataset_dir):
    """A field without "file" takes its name as the stem: a name with a slash is refused."""
    def change(m):
        m["fields"]["../meta"] = m["fields"].pop("meta")

    _rewrite(dataset_dir, change)
    with pytest.raises(FormatError, match="not a plain name"):
        open_dataset(dataset_dir)


def test_table_file_symlink_leading_out_is_refused(tmp_path):
    root = tmp_path / "t.chute"
    with ShardWriter(root, {"idx": "int64"}, tables={"emb": np.ones((3, 2), np.float32)}) as w:
        for i in range(4):
            w.write({"idx": i % 3})
    outside = tmp_path / "emb.table.npy"
    outside.write_bytes((root / "emb.table.npy").read_bytes())
    (root / "emb.table.npy").unlink()
    (root / "emb.table.npy").symlink_to(outside)
    _refused(root, "outside the dataset")


def test_meta_update_never_touches_files_outside(tmp_path, dataset_dir):
    """The attack: a shard named ../evil made `meta update` delete and write in a sibling."""
    outside = _outside_copy(dataset_dir)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    _rewrite(dataset_dir, lambda m: m["shards"][0].update(name="../evil"))
    updates = tmp_path / "u.jsonl"
    updates.write_text(json.dumps({"key": "k0", "caption": "x"}) + "\n")
    assert main(["meta", "update", str(dataset_dir), str(updates)]) == 1
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == sorted(["d.chute", "evil", "u.jsonl"])
