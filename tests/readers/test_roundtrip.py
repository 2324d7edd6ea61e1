import pickle

import numpy as np
import pytest

from chute.readers import Dataset, ShardWriter, open_dataset

from .conftest import random_payloads, write_dataset


def test_samples_round_trip(dataset_dir, payloads):
    ds = open_dataset(dataset_dir)
    assert len(ds) == len(payloads)
    assert len(ds.manifest["shards"]) > 3
    assert ds.fields == {"image": "bytes", "label": "scalar", "height": "scalar",
                         "width": "scalar", "meta": "json"}
    for i, payload in enumerate(payloads):
        sample = ds[i]
        assert sample["image"].dtype == np.uint8
        assert sample["image"].tobytes() == payload
        assert sample["label"] == i % 7 and isinstance(sample["label"], np.int64)
        assert sample["meta"] == {"key": f"k{i}", "caption": f"sample {i}"}
    assert ds[-1]["meta"]["key"] == f"k{len(payloads) - 1}"


def test_views_are_zero_copy_and_read_only(dataset_dir):
    ds = open_dataset(dataset_dir)
    view = next(v for v in ds.views(np.arange(10)) if v.size)
    assert not view.flags.owndata and not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1


def test_columns_in_global_order(dataset_dir, payloads):
    ds = open_dataset(dataset_dir)
    n = len(payloads)
    np.testing.assert_array_equal(ds.column("label"), np.arange(n) % 7)
    assert ds.column("label").dtype == np.int64
    assert ds.column("height").dtype == np.int32
    np.testing.assert_array_equal(ds.column("width"), 2 * np.arange(n) + 1)
    with pytest.raises(KeyError):
        ds.column("image")


def test_gather_matches_samples(dataset_dir, payloads):
    ds = open_dataset(dataset_dir)
    ids = np.random.default_rng(1).integers(0, len(ds), 256)
    data, offsets = ds.gather(ids)
    assert data.dtype == np.uint8 and data.flags.c_contiguous
    assert offsets.dtype == np.int64 and len(offsets) == len(ids) + 1 and offsets[0] == 0
    for k, i in enumerate(ids):
        assert data[offsets[k]:offsets[k + 1]].tobytes() == payloads[i]
    np.testing.assert_array_equal(np.diff(offsets), ds.sizes(ids))


def test_gather_into_given_buffer(dataset_dir, payloads):
    ds = open_dataset(dataset_dir)
    ids = np.array([5, 3, 5, 100])
    out = np.full(10_000, 7, np.uint8)
    data, offsets = ds.gather(ids, out=out)
    assert np.shares_memory(data, out) and data.size == offsets[-1]
    assert data.tobytes() == b"".join(payloads[i] for i in ids)
    small = np.zeros(1, np.uint8)
    data, _ = ds.gather(ids, out=small)
    assert not np.shares_memory(data, small) and data.tobytes() == out[: data.size].tobytes()
    data, offsets = ds.gather(np.array([], np.int64))
    assert data.size == 0 and offsets.tolist() == [0]


def test_locate_names_shard(dataset_dir):
    ds = open_dataset(dataset_dir)
    shards = ds.manifest["shards"]
    first = shards[0]["num_samples"]
    assert ds.locate(0) == (shards[0]["name"], 0)
    assert ds.locate(first) == (shards[1]["name"], 0)
    assert ds.locate(len(ds) - 1) == (shards[-1]["name"], shards[-1]["num_samples"] - 1)


def test_pickle_reopens(dataset_dir, payloads):
    ds = open_dataset(dataset_dir)
    copy = pickle.loads(pickle.dumps(ds))
    assert isinstance(copy, Dataset) and len(copy) == len(ds)
    assert copy.fingerprint == ds.fingerprint
    assert copy[17]["image"].tobytes() == payloads[17]


def test_fingerprint_is_stable_and_tracks_data(tmp_path):
    payloads = random_payloads(20)
    a = open_dataset(write_dataset(tmp_path / "a", payloads)).fingerprint
    b = open_dataset(write_dataset(tmp_path / "b", payloads)).fingerprint
    changed = [p + b"x" for p in payloads]
    c = open_dataset(write_dataset(tmp_path / "c", changed)).fingerprint
    assert a == b != c


def test_class_names_and_inferred_fields(tmp_path):
    with ShardWriter(tmp_path / "d", class_names=["cat", "dog"]) as writer:
        writer.write({"image": np.arange(5, dtype=np.uint8), "label": 1, "score": 0.5,
                      "meta": {"a": [1, 2]}})
    ds = open_dataset(tmp_path / "d" / "chute.json")
    assert ds.class_names == ["cat", "dog"]
    assert ds.fields == {"image": "bytes", "label": "scalar", "score": "scalar", "meta": "json"}
    assert ds[0]["image"].tolist() == [0, 1, 2, 3, 4] and ds[0]["score"] == 0.5


def test_writer_rejects_inconsistent_samples(tmp_path):
    with pytest.raises(ValueError, match="same fields"):
        with ShardWriter(tmp_path / "d", {"image": "bytes"}) as writer:
            writer.write({"image": b"x", "label": 1})
    assert not (tmp_path / "d" / "chute.json").exists()
    with pytest.raises(ValueError, match="overflows"):
        with ShardWriter(tmp_path / "e", {"height": "int32"}) as writer:
            writer.write({"height": 2**40})


def test_empty_dataset(tmp_path):
    with ShardWriter(tmp_path / "d", {"image": "bytes", "label": "int64"}):
        pass
    ds = open_dataset(tmp_path / "d")
    assert len(ds) == 0 and ds.column("label").size == 0
    assert ds.gather(np.array([], np.int64))[0].size == 0


def test_existing_dataset_needs_overwrite(dataset_dir, payloads):
    from chute.errors import ChuteError

    with pytest.raises(ChuteError, match="overwrite"):
        ShardWriter(dataset_dir, {"image": "bytes"})
    write_dataset(dataset_dir, payloads[:3], overwrite=True)
    assert len(open_dataset(dataset_dir)) == 3
