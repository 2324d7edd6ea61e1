"""Two writers of one destination (issue 11, defect 5) and overlapping metadata updates
(defect 10): one exclusive lock per dataset folder; the loser gets a clear error and never
deletes the winner's files; a second update waits and applies on top of the first."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import chute.convert._meta_update as meta_update
from chute.convert import ShardWriter, update_metadata
from chute.errors import ChuteError
from chute.readers import open_dataset, verify_dataset
from tests.readers._images import make_imagefolder

REPO = Path(__file__).resolve().parents[2]


def _write(path, n, start=0, **kwargs):
    with ShardWriter(path, {"x": "int64", "meta": "json"}, shard_size=16, **kwargs) as w:
        for i in range(start, start + n):
            w.write({"x": i, "meta": {"key": f"k{i}"}})


def test_second_writer_is_refused_and_first_completes(tmp_path):
    dst = tmp_path / "d.chute"
    first = ShardWriter(dst, {"x": "int64"}, shard_size=8)
    for i in range(5):
        first.write({"x": i})
    with pytest.raises(ChuteError, match=f"{dst}: another process .*is writing this dataset"):
        ShardWriter(dst, {"x": "int64"})
    with pytest.raises(ChuteError, match="another process"):
        ShardWriter(dst, {"x": "int64"}, overwrite=True)
    for i in range(5, 9):
        first.write({"x": i})
    first.close()
    ds = open_dataset(dst)
    assert ds.column("x").tolist() == list(range(9)) and verify_dataset(dst) == []
    assert sorted(os.listdir(tmp_path)) == ["d.chute"]  # no lock file, no staging folder


def test_failed_write_leaves_the_old_dataset(tmp_path):
    dst = tmp_path / "d.chute"
    _write(dst, 4)
    with pytest.raises(ValueError), ShardWriter(dst, {"x": "int64"}, overwrite=True) as w:
        w.write({"x": 1})
        w.write({"x": "not a number"})
    assert open_dataset(dst).column("x").tolist() == [0, 1, 2, 3]
    assert sorted(os.listdir(tmp_path)) == ["d.chute"]


_RACER = """
import sys, time
from chute.cli import main
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))  # both processes start converting together
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_two_convert_processes_to_one_destination(tmp_path):
    src = tmp_path / "src"
    make_imagefolder(src, bad=False)
    dst = tmp_path / "out.chute"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.time() + 4.0  # after both have imported chute
    procs = [subprocess.Popen(
        [sys.executable, "-c", _RACER, str(start), "convert", "imagefolder", str(src),
         str(dst), "--workers", "1", "--no-progress", "--shard-size", "1KB"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "another process" in loser or "already exists" in loser, loser
    assert loser.count("\n") == 1 and "Traceback" not in loser
    ds = open_dataset(dst)
    assert len(ds) == 8 and verify_dataset(dst) == []
    assert sorted(os.listdir(tmp_path)) == ["out.chute", "src"]


def test_overlapping_meta_updates_lose_nothing(tmp_path, monkeypatch):
    dst = tmp_path / "d.chute"
    _write(dst, 6)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"key": "k1", "caption": "from a"}) + "\n")
    second.write_text(json.dumps({"key": "k4", "caption": "from b"}) + "\n")
    paused = threading.Event()
    resume = threading.Event()
    read_updates = meta_update._read_updates

    def slow(jsonl, key):  # the first update stops after it has read the dataset
        if Path(jsonl) == first:
            paused.set()
            resume.wait(10)
        return read_updates(jsonl, key)

    monkeypatch.setattr(meta_update, "_read_updates", slow)
    errors = []

    def run(jsonl):
        try:
            update_metadata(dst, jsonl)
        except Exception as exc:  # reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=(first,))
    a.start()
    assert paused.wait(10)
    b = threading.Thread(target=run, args=(second,))
    b.start()
    time.sleep(0.5)  # the second update runs now (without a lock it would finish first)
    resume.set()
    a.join(20)
    b.join(20)
    assert errors == []
    metas = [open_dataset(dst)[i]["meta"] for i in range(6)]
    assert metas[1] == {"key": "k1", "caption": "from a"}
    assert metas[4] == {"key": "k4", "caption": "from b"}
    assert verify_dataset(dst) == []


def test_destination_under_a_file_is_a_chute_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ChuteError, match="cannot create its lock file"):
        ShardWriter(tmp_path / "file" / "d.chute", {"x": "int64"})


def test_overwrite_without_an_atomic_exchange(tmp_path, monkeypatch):
    """Where the kernel has no RENAME_EXCHANGE: two renames, and nothing left behind."""
    import chute.convert.destination._publish as publish

    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    dst = tmp_path / "d.chute"
    _write(dst, 3)
    _write(dst, 5, start=10, overwrite=True)
    assert open_dataset(dst).column("x").tolist() == list(range(10, 15))
    assert sorted(os.listdir(tmp_path)) == ["d.chute"]


def test_old_dataset_moved_aside_by_an_interrupted_swap_is_put_back(tmp_path):
    dst = tmp_path / "d.chute"
    _write(dst, 3)
    dst.rename(tmp_path / ".d.chute.old-123-abcd")  # killed between the two renames
    (tmp_path / ".d.chute.tmp-123-abcd").mkdir()  # and the new dataset's folder
    with pytest.raises(ChuteError, match="already exists"):
        ShardWriter(dst, {"x": "int64"})
    assert open_dataset(dst).column("x").tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["d.chute"]


def test_a_late_writer_cannot_keep_a_leftover_alive(tmp_path, monkeypatch):
    """A killed Ray driver's tasks go on writing into its staging folder for a moment
    (docs/ray.md, "Failures"); a file they add while the next write removes the folder
    must not leave it behind (it did: the removal found the folder not empty)."""
    dst = tmp_path / "d.chute"
    _write(dst, 3)
    staging = tmp_path / ".d.chute.tmp-999-dead"
    (staging / "p0").mkdir(parents=True)
    (staging / "p0" / "x.bin").write_bytes(b"x")
    real = os.scandir
    late = []

    def scandir_then_write_late(path="."):
        listing = list(real(path))
        if isinstance(path, int) and not late:  # inside the removal: a late task writes
            try:
                (staging / "late").mkdir()
                late.append("written")
            except FileNotFoundError:
                late.append("refused")
        return _Listing(listing)

    monkeypatch.setattr(os, "scandir", scandir_then_write_late)
    _write(dst, 2, overwrite=True)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["d.chute"]
    assert late == ["refused"]
    assert open_dataset(dst).column("x").tolist() == [0, 1]


class _Listing(list):
    def __enter__(self):
        return iter(self)

    def __exit__(self, *exc):
        return False
