"""Bad input raises a chute error naming the file and what is wrong, never a NumPy crash."""

import json
import pickle

import numpy as np
import pytest

from chute.errors import ChuteError, FormatError
from chute.readers import SampleIndexError, open_dataset


def shard_file(root, name, index=0):
    manifest = json.loads((root / "chute.json").read_text())
    return root / manifest["shards"][index]["name"] / name


def test_missing_shard_folder(dataset_dir):
    folder = shard_file(dataset_dir, "image.bin", 2).parent
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    with pytest.raises(FormatError, match=f"{folder.name}/.*missing"):
        open_dataset(dataset_dir)


def test_truncated_bin(dataset_dir):
    path = shard_file(dataset_dir, "image.bin", 1)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(FormatError) as info:
        open_dataset(dataset_dir)
    assert str(path) in str(info.value) and "truncated" in str(info.value)


def test_truncated_bin_with_forged_manifest_size(dataset_dir):
    """Even if the manifest agrees with the short file, the index bounds check catches it."""
    path = shard_file(dataset_dir, "image.bin", 0)
    path.write_bytes(path.read_bytes()[:-10])
    manifest = json.loads((dataset_dir / "chute.json").read_text())
    manifest["shards"][0]["files"]["image.bin"]["size"] = path.stat().st_size
    (dataset_dir / "chute.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=f"{path}.*points past the end"):
        open_dataset(dataset_dir)


def test_wrong_magic(dataset_dir):
    path = shard_file(dataset_dir, "image.idx")
    raw = bytearray(path.read_bytes())
    raw[:9] = b"NOTANIDX!"
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=f"{path}.*wrong magic"):
        open_dataset(dataset_dir)


def test_foreign_npy(dataset_dir):
    path = shard_file(dataset_dir, "label.npy")
    path.write_bytes(b"x" * path.stat().st_size)
    with pytest.raises(FormatError, match=f"{path}.*not a readable .npy"):
        open_dataset(dataset_dir)


def _rewrite_manifest(root, change):
    manifest = json.loads((root / "chute.json").read_text())
    change(manifest)
    (root / "chute.json").write_text(json.dumps(manifest))


def test_manifest_idx_count_mismatch(dataset_dir):
    def move_one_sample(m):
        m["shards"][0]["num_samples"] += 1
        m["shards"][1]["num_samples"] -= 1

    _rewrite_manifest(dataset_dir, move_one_sample)
    with pytest.raises(FormatError, match="image.idx: holds .* samples but the manifest says"):
        open_dataset(dataset_dir)


def test_manifest_total_mismatch(dataset_dir):
    _rewrite_manifest(dataset_dir, lambda m: m.update(num_samples=m["num_samples"] + 5))
    with pytest.raises(FormatError, match="chute.json: shard sample counts sum"):
        open_dataset(dataset_dir)


def test_not_a_dataset(tmp_path):
    with pytest.raises(FormatError, match="no chute.json"):
        open_dataset(tmp_path)
    with pytest.raises(FormatError, match="no such dataset"):
        open_dataset(tmp_path / "nothing")
    (tmp_path / "chute.json").write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        open_dataset(tmp_path)


def test_index_out_of_range(dataset_dir):
    ds = open_dataset(dataset_dir)
    n = len(ds)
    for bad in (n, -n - 1, 10**9):
        message = f"sample {bad} is out of range for {dataset_dir}"
        with pytest.raises(SampleIndexError, match=message):
            ds[bad]
    for bad in ([0, n], [-1], [5, 2**40]):
        with pytest.raises(SampleIndexError, match="out of range"):
            ds.gather(np.array(bad))
        with pytest.raises(IndexError):
            ds.views(np.array(bad))
    with pytest.raises(ChuteError):
        ds.locate(n)
    assert issubclass(SampleIndexError, ChuteError)
    assert sum(1 for _ in ds) == n  # iteration stops at the end through IndexError


def test_bad_ids_type(dataset_dir):
    ds = open_dataset(dataset_dir)
    with pytest.raises(TypeError):
        ds.gather(np.array([0.5, 1.0]))
    with pytest.raises(TypeError):
        ds.gather(np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError):
        ds.gather([0, 1], out=np.zeros(10_000, np.float32))


def test_pickled_copy_fails_cleanly_when_files_vanish(dataset_dir):
    blob = pickle.dumps(open_dataset(dataset_dir))
    shard_file(dataset_dir, "meta.idx", 3).unlink()
    with pytest.raises(FormatError, match="meta.idx: missing"):
        pickle.loads(blob)


def test_corrupt_json_record(dataset_dir):
    path = shard_file(dataset_dir, "meta.bin")
    raw = bytearray(path.read_bytes())
    raw[0:1] = b"#"  # same size, so only `chute verify` or decoding can notice
    path.write_bytes(bytes(raw))
    ds = open_dataset(dataset_dir)
    with pytest.raises(FormatError, match=f"{path}: record 0 of field 'meta' is not valid JSON"):
        ds[0]
