"""One Ray convert task (`_write_slice` in chute/ray/_engine.py) run in this process, without
Ray: its part adopts into the dataset the single-process convert writes, a --strict failure
comes back as its one line, and a staging folder this node cannot see is named."""

from __future__ import annotations

import os

import pytest

from chute.convert import ConvertOptions, ImageJob, PartTarget, ShardWriter, run_job
from chute.convert._sources import list_imagefolder
from chute.ray._engine import _write_slice
from chute.readers import open_dataset
from tests.ray._sources import image_folder, rows_of


def job_of(tmp_path, **options):
    folder = image_folder(tmp_path / "src")
    sources, names = list_imagefolder(folder)
    return ImageJob(sources, names, {"kind": "imagefolder", "root": str(folder)},
                    ConvertOptions(shard_size="2KB", progress=False, **options))


def test_slices_written_by_the_task_function_adopt_into_the_single_process_dataset(tmp_path):
    job = job_of(tmp_path)
    run_job(job, tmp_path / "one.chute", workers=1)
    with ShardWriter(tmp_path / "parts.chute", job.fields, shard_size="2KB",
                     class_names=job.class_names) as writer:
        target = writer.part_target()
        results = [_write_slice(job, target, i, a, min(a + 10, len(job.units)), None)
                   for i, a in enumerate(range(0, len(job.units), 10))]
        for result in results:
            assert result["error"] == ""
            writer.adopt(result["part"])
    assert rows_of(open_dataset(tmp_path / "parts.chute")) == \
        rows_of(open_dataset(tmp_path / "one.chute"))
    assert [s for r in results for s in r["skipped"]] == [
        (str(tmp_path / "src" / "class1" / "04.jpg"), "truncated JPEG (no end-of-image marker)")]


def test_a_strict_failure_comes_back_as_its_line_and_leaves_no_shard(tmp_path):
    job = job_of(tmp_path, strict=True)
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "x.chute", job.fields) as writer:
        target = writer.part_target()
        result = _write_slice(job, target, 0, 0, len(job.units), None)
        assert "truncated" in result["error"] and "--strict" in result["error"]
        assert "part" not in result
        assert os.listdir(target.location) == []
        raise RuntimeError("drop the dataset")


def test_a_staging_folder_this_node_cannot_see_is_named(tmp_path):
    job = job_of(tmp_path)
    target = PartTarget(str(tmp_path / "elsewhere" / ".x.tmp-1"), False, 2048, job.fields)
    result = _write_slice(job, target, 3, 0, 4, None)
    assert "staging folder is not on the node that ran task 3" in result["error"]
    assert "s3://" in result["error"]


class _Unreachable(ImageJob):
    def write(self, units, writer, report, progress, workers):
        from chute.readers import StorageError

        raise StorageError("s3://b/x: the endpoint did not answer within 300 s")


def test_a_storage_error_is_raised_for_ray_to_retry_not_returned_as_final(tmp_path):
    from chute.readers import StorageError

    job = job_of(tmp_path)
    job.__class__ = _Unreachable
    with ShardWriter(tmp_path / "x.chute", job.fields) as writer:
        with pytest.raises(StorageError):
            _write_slice(job, writer.part_target(), 0, 0, 4, None)
