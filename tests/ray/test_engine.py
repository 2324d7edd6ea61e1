"""`RayEngine` (chute/ray/_engine.py) on a local Ray instance with 2 CPUs: every converter
writes the same dataset on Ray as in one process (samples, order, labels, metadata, skips),
also when every task dies on its first attempt, and a --strict failure leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chute.convert import (
    AudioConvertOptions,
    AudioJob,
    ConvertOptions,
    HFJob,
    ImageJob,
    LitdataJob,
    MDSJob,
    VideoJob,
    WebDatasetJob,
    ZarrJob,
    run_job,
)
from chute.errors import ChuteError
from chute.readers import open_dataset, verify_dataset
from tests.ray import _sources

pytestmark = pytest.mark.slow  # Ray starts worker processes


def _images(root: Path, options: ConvertOptions):
    from chute.convert._sources import list_imagefolder

    folder = _sources.image_folder(root / "src")
    sources, names = list_imagefolder(folder)
    return lambda: ImageJob(sources, names, {"kind": "imagefolder", "root": str(folder)},
                            options)


def _csv(root: Path, options: ConvertOptions):
    from chute.convert._sources import list_csv

    path = _sources.image_csv(root / "src")
    sources, names = list_csv(path)
    return lambda: ImageJob(sources, names, {"kind": "csv", "file": str(path)}, options)


def _webdataset(root: Path, options: ConvertOptions):
    tars = _sources.tars(root / "src")
    return lambda: WebDatasetJob(tars, options, 1 << 20)


def _video(root: Path, options: ConvertOptions):
    path = _sources.videos(root / "src")
    return lambda: VideoJob(path, shard_size=options.shard_size, progress=False)


def _audio(root: Path, options: ConvertOptions):
    path = _sources.recordings(root / "src")
    audio = AudioConvertOptions(shard_size=options.shard_size, progress=False)
    return lambda: AudioJob(path, audio)


def _zarr(root: Path, options: ConvertOptions):
    path = _sources.zarr_group(root / "src")
    return lambda: ZarrJob(path, shard_size=options.shard_size, sample_array="base_frames")


def _hf(root: Path, options: ConvertOptions):
    datasets = pytest.importorskip("datasets")
    path = _sources.hf_saved(root / "src")
    return lambda: HFJob(datasets.load_from_disk(str(path)), path,
                         shard_size=options.shard_size, progress=False)


def _peer_rows(n: int = 16) -> list[dict]:
    from tests.convert._peers import jpeg_bytes

    rows = [{"image": jpeg_bytes(i), "label": i, "caption": f"c{i}"} for i in range(n)]
    rows[5]["image"] = rows[5]["image"][:40]  # a truncated JPEG: skipped and listed
    return rows


def _mds(root: Path, options: ConvertOptions):
    from tests.convert._peers import write_mds_layout

    src = write_mds_layout(root / "src", _peer_rows(),
                           {"image": "jpeg", "label": "int", "caption": "str"}, per_shard=2,
                           compression="zstd")
    return lambda: MDSJob(src, options)


def _litdata(root: Path, options: ConvertOptions):
    from tests.convert._peers import write_litdata_layout

    src = write_litdata_layout(root / "src", _peer_rows(),
                               {"image": "jpeg", "label": "int", "caption": "str"}, per_chunk=2)
    return lambda: LitdataJob(src, options)


CONVERTERS = {"imagefolder": _images, "csv": _csv, "webdataset": _webdataset, "video": _video,
              "audio": _audio, "zarr": _zarr, "hf": _hf, "mds": _mds, "litdata": _litdata}
OPTIONS = ConvertOptions(shard_size="4KB", progress=False, workers=1)


def assert_same_dataset(ray_dst: Path | str, local_dst: Path | str) -> None:
    ours, theirs = open_dataset(ray_dst), open_dataset(local_dst)
    assert _sources.rows_of(ours) == _sources.rows_of(theirs)
    for key in ("fields", "class_names", "source", "num_samples", "zarr"):
        assert ours.manifest.get(key) == theirs.manifest.get(key), key
    assert verify_dataset(ray_dst) == []


def skipped(dst: Path) -> str | None:
    path = dst / "skipped.tsv"
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize("kind", sorted(CONVERTERS))
def test_every_converter_writes_on_ray_what_it_writes_in_one_process(kind, tmp_path, ray_local):
    from chute.ray import RayEngine

    job = CONVERTERS[kind](tmp_path, OPTIONS)
    local = run_job(job(), tmp_path / "local.chute", workers=1)
    on_ray = run_job(job(), tmp_path / "ray.chute", engine=RayEngine(task_size=3))
    assert on_ray.written == local.written > 0
    assert on_ray.skipped == local.skipped and on_ray.actions == local.actions
    assert_same_dataset(tmp_path / "ray.chute", tmp_path / "local.chute")
    assert skipped(tmp_path / "ray.chute") == skipped(tmp_path / "local.chute")
    if kind in ("imagefolder", "webdataset", "video", "mds", "litdata"):
        assert local.skipped  # the sources hold an input that is skipped
    shards = open_dataset(tmp_path / "ray.chute").manifest["shards"]
    assert len(shards) > 2  # several tasks, each with its shards


@pytest.mark.parametrize(("kind", "task_size"), [("imagefolder", 4), ("webdataset", 1)])
def test_a_task_that_dies_on_its_first_attempt_is_retried_with_the_same_result(
        kind, task_size, tmp_path, ray_local, monkeypatch):
    from chute.ray import RayEngine

    job = CONVERTERS[kind](tmp_path, ConvertOptions(shard_size="1KB", progress=False))
    run_job(job(), tmp_path / "local.chute", workers=1)
    killed = tmp_path / "killed"
    killed.mkdir()
    monkeypatch.setenv("CHUTE_TEST_RAY_KILL_FIRST_ATTEMPT", str(killed))
    units = len(job().units)
    run_job(job(), tmp_path / "ray.chute", engine=RayEngine(task_size=task_size))
    # every task's first attempt died half way
    assert len(os.listdir(killed)) == -(-units // task_size) > 2
    assert_same_dataset(tmp_path / "ray.chute", tmp_path / "local.chute")
    names = sorted(os.listdir(tmp_path / "ray.chute"))
    shards = open_dataset(tmp_path / "ray.chute").manifest["shards"]
    assert names == sorted([s["name"] for s in shards] + ["chute.json", "skipped.tsv"])
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".ray.chute")]


def test_strict_stops_the_convert_and_leaves_no_dataset(tmp_path, ray_local):
    from chute.ray import RayEngine

    strict = ConvertOptions(shard_size="1KB", progress=False, strict=True)
    job = _images(tmp_path, strict)
    with pytest.raises(ChuteError, match="truncated.*--strict"):
        run_job(job(), tmp_path / "ray.chute", engine=RayEngine(task_size=2))
    assert not (tmp_path / "ray.chute").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".ray.chute")]


def test_a_convert_to_s3_on_ray_equals_the_local_one(tmp_path, ray_local, s3, monkeypatch):
    from chute.ray import RayEngine
    from chute.readers.storage._object_store import Remote

    _, bucket = s3
    job = _images(tmp_path, ConvertOptions(shard_size="1KB", progress=False))
    run_job(job(), tmp_path / "local.chute", workers=1)
    killed = tmp_path / "killed"
    killed.mkdir()
    monkeypatch.setenv("CHUTE_TEST_RAY_KILL_FIRST_ATTEMPT", str(killed))
    url = f"{bucket}/ray"
    run_job(job(), url, engine=RayEngine(task_size=4))
    assert_same_dataset(url, tmp_path / "local.chute")
    listed = {name.split("/")[0] for name, _ in Remote(url).list()}
    shards = {s["name"] for s in open_dataset(url).manifest["shards"]}
    assert listed == shards | {"chute.json", "skipped.tsv"}  # killed attempts' shards gone


def test_a_killed_driver_leaves_the_old_dataset_whole(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    src = _sources.image_folder(tmp_path / "src")
    dst = tmp_path / "dst.chute"
    from chute.cli import main

    assert main(["convert", "imagefolder", str(src), str(dst), "--no-progress",
                 "--shard-size", "1KB"]) == 0
    before = open_dataset(dst).fingerprint
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys; from chute.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "convert", "imagefolder", str(src), str(dst),
         "--engine", "ray", "--task-size", "1", "--overwrite", "--no-progress",
         "--shard-size", "1KB"], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until some part is written in the staging folder
            staged = [p for p in tmp_path.glob(".dst.chute.tmp-*/p*")]
            if staged or driver.poll() is not None:
                break
            time.sleep(0.05)
        assert staged, "the Ray convert wrote no part before it ended"
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert open_dataset(dst).fingerprint == before and verify_dataset(dst) == []
    # the next write cleans up what the killed one left beside the destination
    assert main(["convert", "imagefolder", str(src), str(dst), "--no-progress", "--overwrite",
                 "--shard-size", "1KB"]) == 0
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".dst.chute.")]
