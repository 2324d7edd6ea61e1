"""`chute.ray.write_dataset` and `read_dataset` (chute/ray/_sink.py, _source.py) on a local
Ray instance: a Ray Dataset of dicts reads back through `open_dataset` with equal rows, in
order, also when its write tasks die on their first attempt; a chute dataset reads as a Ray
Dataset of `len(dataset)` rows, one block per shard, equal to the samples."""

from __future__ import annotations

import os

import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.convert import write_dataset as write_in_process
from chute.errors import ChuteError
from chute.readers import open_dataset, verify_dataset
from tests._media import encode, jpeg, smooth_image

pytestmark = pytest.mark.slow  # Ray starts worker processes


def ray_rows(n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"image": jpeg(8 + i % 5, 6 + i % 3, seed=i), "label": i,
             "latent": rng.standard_normal((2, 4)).astype(np.float16),
             "meta": {"key": f"k{i}", "n": i}} for i in range(n)]


def same_rows(dataset, rows) -> None:
    assert len(dataset) == len(rows)
    for i, row in enumerate(rows):
        got = dataset[i]
        assert bytes(got["image"]) == row["image"] and int(got["label"]) == row["label"]
        assert np.array_equal(got["latent"], row["latent"]) and got["meta"] == row["meta"]


def test_a_ray_dataset_written_reads_back_with_equal_rows_in_order(tmp_path, ray_local):
    import ray.data

    from chute.ray import write_dataset

    rows = ray_rows(60)
    source = ray.data.from_items(rows, override_num_blocks=9)
    held = source.take_all()  # the rows as Ray holds them
    written = write_dataset(source, tmp_path / "w.chute", shard_size=400)
    same_rows(open_dataset(tmp_path / "w.chute"), held)
    assert len(written) == 60 and len(written.manifest["shards"]) > 9
    assert verify_dataset(tmp_path / "w.chute") == []
    assert sorted(os.listdir(tmp_path)) == ["w.chute"]  # no staging folder left


def test_images_get_the_height_and_width_columns_the_pipeline_needs(tmp_path, ray_local):
    """docs/ray.md's example, issue 38 item 7: rows of JPEG (and PNG) bytes are written as
    `chute.convert.write_dataset` writes them (an image field, height and width), so a
    Pipeline streams them."""
    import ray.data

    from chute.pipelines import ImageOptions, Pipeline
    from chute.ray import write_dataset

    rows = [{"image": jpeg(10 + i, 7 + i % 3, seed=i) if i % 4 else
             encode(smooth_image(9, 5 + i, seed=i), "PNG"), "label": i % 3,
             "meta": {"key": f"k{i}"}} for i in range(12)]
    written = write_dataset(ray.data.from_items(rows, override_num_blocks=3),
                            tmp_path / "x.chute", shard_size=400)
    expected = write_in_process(rows, tmp_path / "local.chute")
    assert written.manifest["fields"] == expected.manifest["fields"]
    for i in range(len(rows)):
        assert {k: written[i][k] for k in ("height", "width")} == \
            {k: expected[i][k] for k in ("height", "width")}
        assert bytes(written[i]["image"]) == bytes(expected[i]["image"])
    image = ImageOptions(size=8, backend="cpu", backend_options={"threads": 1})
    with Pipeline(tmp_path / "x.chute", 4, fields={"image": image, "label": None},
                  device="cpu") as pipe:
        batch = next(iter(pipe))
    assert tuple(batch["image"].shape) == (4, 3, 8, 8)


class _Slow:
    """A stage whose blocks finish out of order: 3 actors (holding no CPU, so the write tasks
    always find one) sleeping a random while per block."""

    def __call__(self, batch):
        import random
        import time

        time.sleep(random.random() * 0.3)
        return batch


def test_rows_keep_the_datasets_order_through_a_stage_that_finishes_out_of_order(tmp_path,
                                                                               ray_local):
    import ray.data

    from chute.ray import write_dataset

    source = ray.data.range(64, override_num_blocks=16)
    staged = source.map_batches(_Slow, concurrency=3, num_cpus=0, batch_size=None)
    written = write_dataset(staged, tmp_path / "w.chute", shard_size=64)
    assert [int(written[i]["id"]) for i in range(len(written))] == list(range(64))


def test_write_tasks_that_die_on_their_first_attempt_leave_nothing_behind(tmp_path, ray_local):
    import ray.data

    from chute.ray import write_dataset

    marks = tmp_path / "marks"
    marks.mkdir()

    def dies_once(batch):  # fused with the write task: its death kills a half-written part
        mark = marks / f"{int(batch['label'][0])}"
        if not mark.exists():
            mark.touch()
            os._exit(1)
        return batch

    rows = ray_rows(40)
    source = ray.data.from_items(rows, override_num_blocks=4)
    held = source.take_all()
    write_dataset(source.map_batches(dies_once, batch_size=None), tmp_path / "w.chute",
                  shard_size="1KB")
    assert len(os.listdir(marks)) == 4
    same_rows(open_dataset(tmp_path / "w.chute"), held)
    shards = [s["name"] for s in open_dataset(tmp_path / "w.chute").manifest["shards"]]
    assert sorted(os.listdir(tmp_path / "w.chute")) == sorted(shards + ["chute.json"])


def write_chute(path, rows, shard_size="2KB"):
    with ShardWriter(path, {"image": {"kind": "bytes", "media": "image"}, "label": "int64",
                            "latent": "ndarray", "meta": "json"},
                     shard_size=shard_size) as writer:
        for row in rows:
            writer.write(row)
    return open_dataset(path)


def test_a_chute_dataset_reads_as_a_ray_dataset_one_block_per_shard(tmp_path, ray_local):
    from chute.ray import read_dataset

    rows = [{**r, "meta": {"key": r["meta"]["key"], **({"odd": True} if i % 2 else {})}}
            for i, r in enumerate(ray_rows(45))]
    dataset = write_chute(tmp_path / "r.chute", rows)
    read = read_dataset(tmp_path / "r.chute")
    # without it the rows came back in the order their read tasks finished (seen once in CI)
    assert read.context.execution_options.preserve_order
    assert read.count() == len(dataset)
    assert read.materialize().num_blocks() == len(dataset.manifest["shards"]) > 3
    got = read.take_all()
    for row, want in zip(got, rows, strict=True):
        assert row["image"] == want["image"] and row["label"] == want["label"]
        assert np.array_equal(row["latent"], want["latent"])
        assert row["meta"] == want["meta"]  # exactly as stored: no keys added by Arrow
    only = read_dataset(dataset, fields=["label"]).take_all()
    assert [r["label"] for r in only] == list(range(45)) and set(only[0]) == {"label"}


def test_read_dataset_refuses_a_field_it_does_not_have(tmp_path, ray_local):
    from chute.ray import read_dataset

    write_chute(tmp_path / "r.chute", ray_rows(3))
    with pytest.raises(ChuteError, match="no per-sample fields \\['caption'\\]"):
        read_dataset(tmp_path / "r.chute", fields=["caption"])


def test_an_s3_dataset_round_trips_through_ray(tmp_path, ray_local, s3):
    import ray.data

    from chute.ray import read_dataset, write_dataset

    _, bucket = s3
    rows = ray_rows(30)
    source = ray.data.from_items(rows, override_num_blocks=3)
    held = source.take_all()
    write_dataset(source, f"{bucket}/w", shard_size="2KB")
    same_rows(open_dataset(f"{bucket}/w"), held)
    back = read_dataset(f"{bucket}/w").take_all()
    assert [r["label"] for r in back] == list(range(30))
