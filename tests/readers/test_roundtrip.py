
import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.readers import open_dataset

from .conftest import write_dataset


def test_locate_names_shard(dataset_dir):
    ds = open_dataset(dataset_dir)
    shards = ds.manifest["shards"]
    first = shards[0]["num_samples"]
    assert ds.locate(0) == (shards[0]["name"], 0)
    assert ds.locate(first) == (shards[1]["name"], 0)
    assert ds.locate(len(ds) - 1) == (shards[-1]["name"], shards[-1]["num_samples"] - 1)


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
