"""A dataset written in parts (chute/convert/_writer.py, `PartWriter` and
`ShardWriter.adopt`), as a distributed engine writes it (docs/ray.md): parts adopted in order
read back as one writer's dataset, and the shards of parts nobody adopts (failed or retried
attempts) never reach the result, locally or in object storage."""

from __future__ import annotations

import os

import numpy as np
import pytest

from chute.convert import PartWriter, ShardWriter
from chute.errors import ChuteError
from chute.readers import open_dataset, verify_dataset

FIELDS = {"data": "bytes", "label": "int64", "z": "ndarray", "meta": "json"}


def rows(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"data": rng.bytes(int(rng.integers(50, 400))), "label": i,
             "z": rng.standard_normal((3, 2)).astype(np.float32), "meta": {"key": f"k{i}"}}
            for i in range(n)]


def write_part(target, part_rows, *, close=True):
    writer = PartWriter(target)
    for row in part_rows:
        writer.write(row)
    if close:
        writer.close()
    return writer


def same(dataset, expected) -> None:
    assert len(dataset) == len(expected)
    for i, row in enumerate(expected):
        got = dataset[i]
        assert bytes(got["data"]) == row["data"] and int(got["label"]) == row["label"]
        assert np.array_equal(got["z"], row["z"]) and got["meta"] == row["meta"]


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("where", ["local", "s3"])
def test_parts_adopted_in_order_read_back_as_one_writers_dataset(where, tmp_path, request):
    dest = str(tmp_path / "parts.chute")
    if where == "s3":
        dest = request.getfixturevalue("s3")[1] + "/parts"
    data = rows(40)
    with ShardWriter(dest, FIELDS, shard_size="1KB") as writer:
        target = writer.part_target()
        # written out of order, each with several shards, adopted in order
        parts = {k: write_part(target, data[k * 10:(k + 1) * 10]).part for k in (2, 0, 3, 1)}
        # a failed attempt: shards committed, never adopted; one still open when it died
        write_part(target, data[:7])
        write_part(target, data[:3], close=False)
        for k in range(4):
            writer.adopt(parts[k])
    dataset = open_dataset(dest)
    same(dataset, data)
    assert verify_dataset(dest) == []
    names = [s["name"] for s in dataset.manifest["shards"]]
    assert len(names) == len(set(names)) > 4
    if where == "local":  # named as one writer names them; nothing else left in the folder
        assert names == [f"{i:05d}" for i in range(len(names))]
        assert sorted(os.listdir(dest)) == sorted(names + ["chute.json"])
        assert not [e for e in os.listdir(tmp_path) if e.startswith(".parts")]
    else:
        from chute.readers.storage._object_store import Remote

        stored = {name.split("/")[0] for name, _ in Remote(dest).list()}
        assert stored == set(names) | {"chute.json"}


def test_a_part_with_other_fields_is_refused(tmp_path):
    with pytest.raises(ValueError, match="same fields"):
        with ShardWriter(tmp_path / "x.chute", None, shard_size="1KB") as writer:
            target = writer.part_target()
            first = write_part(target, rows(3)).part
            other = write_part(target, [{**r, "z": r["z"].astype(np.float64)}
                                        for r in rows(3)]).part
            writer.adopt(first)
            writer.adopt(other)
    assert not (tmp_path / "x.chute").exists()
    assert not list(tmp_path.iterdir())  # the staging folder went with the abort


def test_an_aborted_part_removes_its_own_shards_only(tmp_path):
    with ShardWriter(tmp_path / "y.chute", FIELDS, shard_size="1KB") as writer:
        target = writer.part_target()
        kept = write_part(target, rows(10)).part
        dropped = write_part(target, rows(10, seed=1), close=False)
        dropped.abort()
        staged = os.listdir(target.location)
        assert sorted(staged) == sorted(s["name"] for s in kept["shards"])
        writer.adopt(kept)
    same(open_dataset(tmp_path / "y.chute"), rows(10))


def test_adopt_after_write_is_refused(tmp_path):
    with pytest.raises(ChuteError, match="adopt"):
        with ShardWriter(tmp_path / "z.chute", FIELDS, shard_size="1KB") as writer:
            part = write_part(writer.part_target(), rows(2)).part
            writer.write(rows(1)[0])
            writer.adopt(part)


def test_an_aborted_write_to_s3_leaves_no_part_behind(s3):
    from chute.readers.storage._object_store import Remote

    url = s3[1] + "/aborted"
    with pytest.raises(RuntimeError):
        with ShardWriter(url, FIELDS, shard_size="1KB") as writer:
            target = writer.part_target()
            write_part(target, rows(10))
            write_part(target, rows(5), close=False)
            assert list(Remote(url).list())  # the parts' shards are up there
            raise RuntimeError("the convert failed")
    assert list(Remote(url).list()) == []
