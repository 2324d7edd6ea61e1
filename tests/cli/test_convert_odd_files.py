"""Odd source files (issue 11, defects 8 and 10): a file name that is not UTF-8 is stored
losslessly instead of aborting the convert; broken symlinks, FIFOs and a folder named like an
image are listed in skipped.tsv (a FIFO is never read: that would block forever)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chute.cli import main
from chute.convert import update_metadata
from chute.readers import open_dataset
from tests.readers._images import jpeg_bytes

REPO = Path(__file__).resolve().parents[2]


def test_non_utf8_names_are_stored_losslessly(tmp_path, capsys):
    src = tmp_path / "src"
    klass = os.fsdecode(b"cl\xe0ss")  # Latin-1 bytes: not UTF-8
    name = os.fsdecode(b"caf\xe9.jpg")
    (src / klass).mkdir(parents=True)
    (src / "plain").mkdir()
    (src / klass / name).write_bytes(jpeg_bytes(20, 16, seed=1))
    (src / klass / os.fsdecode(b"bad\xff.jpg")).write_bytes(b"not a jpeg")
    (src / "plain" / "a.jpg").write_bytes(jpeg_bytes(18, 14, seed=2))
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    ds = open_dataset(dst)
    assert len(ds) == 2
    assert [os.fsencode(n) for n in ds.class_names] == [b"cl\xe0ss", b"plain"]
    keys = [ds[i]["meta"]["key"] for i in range(len(ds))]
    assert os.fsencode(keys[0]) == b"cl\xe0ss/caf\xe9.jpg"
    assert ds[0]["image"].tobytes() == (src / klass / name).read_bytes()
    assert b"cl\xe0ss/bad\xff.jpg" in (dst / "skipped.tsv").read_bytes()
    # the key matches an update written as JSON (lone surrogates are \u escapes there)
    updates = tmp_path / "u.jsonl"
    updates.write_text(json.dumps({"key": keys[0], "caption": "x"}) + "\n")
    assert update_metadata(dst, updates).updated == 1
    assert open_dataset(dst)[0]["meta"]["caption"] == "x"


def test_broken_symlink_fifo_and_folder_are_listed(tmp_path, capsys):
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "c" / "good.jpg").write_bytes(jpeg_bytes(20, 16, seed=1))
    (src / "c" / "broken.jpg").symlink_to(tmp_path / "nowhere.jpg")
    os.mkfifo(src / "c" / "pipe.jpg")
    (src / "c" / "folder.jpg").mkdir()
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    assert len(open_dataset(dst)) == 1
    rows = {r["path"]: r["reason"] for r in
            csv.DictReader((dst / "skipped.tsv").open(), delimiter="\t")}
    assert set(rows) == {str(src / "c" / n) for n in ("broken.jpg", "pipe.jpg", "folder.jpg")}
    assert "FIFO" in rows[str(src / "c" / "pipe.jpg")]
    assert "folder" in rows[str(src / "c" / "folder.jpg")]
    assert "no such file" in rows[str(src / "c" / "broken.jpg")].lower()


@pytest.mark.slow
def test_csv_row_naming_a_fifo_is_skipped_not_read(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")
    (tmp_path / "good.jpg").write_bytes(jpeg_bytes(20, 16, seed=1))
    (tmp_path / "list.csv").write_text("path,label\npipe.jpg,0\ngood.jpg,1\n")
    dst = tmp_path / "out.chute"
    done = subprocess.run(
        [sys.executable, "-m", "chute.cli", "convert", "csv", str(tmp_path / "list.csv"),
         str(dst), "--workers", "1", "--no-progress"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(open_dataset(dst)) == 1
    assert "FIFO" in (dst / "skipped.tsv").read_text()


def test_symlinked_subfolders_are_followed_and_cycles_are_not(tmp_path):
    """Images inside a symlinked sub-folder are found, as torchvision's ImageFolder finds them;
    a link back to a folder being walked is not entered again (no endless walk)."""
    from chute.convert._sources import list_imagefolder

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "b.jpg").write_bytes(jpeg_bytes(20, 16, seed=3))
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    (src / "c" / "a.jpg").write_bytes(jpeg_bytes(20, 16, seed=1))
    (src / "c" / "linked").symlink_to(elsewhere)
    (src / "c" / "loop").symlink_to(src / "c")
    sources, classes = list_imagefolder(src)
    assert classes == ["c"]
    assert [s.key for s in sources] == ["c/a.jpg", "c/linked/deep/b.jpg"]


def test_csv_row_with_a_nul_byte_is_skipped(tmp_path):
    # read_regular_file turns os.open's ValueError into an OSError, so the image converter
    # lists the row as the video and audio converters do instead of failing the convert
    (tmp_path / "good.jpg").write_bytes(jpeg_bytes(20, 16, seed=1))
    (tmp_path / "list.csv").write_text("path,label\nbad\x00.jpg,0\ngood.jpg,1\n")
    dst = tmp_path / "out.chute"
    assert main(["convert", "csv", str(tmp_path / "list.csv"), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    assert len(open_dataset(dst)) == 1
    assert "cannot read the file: embedded null byte" in (dst / "skipped.tsv").read_text()
