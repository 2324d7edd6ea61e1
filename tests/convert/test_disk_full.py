"""A full disk (ENOSPC) while converting or updating metadata (issue 26 item 13): one clear line
naming the destination, nothing left behind (no staging folder, no temporary or half-written
generation files) and the old dataset whole. The disk is filled by a fake: every file write of
the durable writer fails with ENOSPC after a byte budget, and so does closing the file (which
flushes its buffered tail), as a real full disk does."""

from __future__ import annotations

import errno
import json

import pytest

from chute.cli import main
from chute.convert import ShardWriter, update_metadata
from chute.errors import DiskFullError
from chute.readers import open_dataset, verify_dataset
from chute.readers.storage import _files
from tests.readers._images import converted_imagefolder, make_imagefolder


class _FullDisk:
    """Makes HashingWriter fail as a full disk would once `budget` bytes are written."""

    def __init__(self, monkeypatch, budget: int):
        self.budget = budget
        self.failed = 0
        real_write = _files.HashingWriter.write
        disk = self

        def write(writer, data):
            size = len(memoryview(data).cast("B"))
            if size > disk.budget:
                disk.failed += 1
                real_close = writer._file.close

                def close():  # the buffered tail cannot be flushed either
                    real_close()
                    raise OSError(errno.ENOSPC, "No space left on device")

                writer._file.close = close
                raise OSError(errno.ENOSPC, "No space left on device")
            disk.budget -= size
            real_write(writer, data)

        monkeypatch.setattr(_files.HashingWriter, "write", write)


def _entries(folder):
    return sorted(p.name for p in folder.iterdir())


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_shard_writer_full_disk_leaves_nothing(tmp_path, monkeypatch):
    disk = _FullDisk(monkeypatch, budget=3000)
    with pytest.raises(DiskFullError) as caught:
        with ShardWriter(tmp_path / "d.chute", {"x": "bytes"}, shard_size="2KB") as w:
            for i in range(100):
                w.write({"x": bytes([i]) * 500})
    assert disk.failed
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'd.chute'}: no space left on device while writing")
    assert "free space or write elsewhere" in message and "\n" not in message
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert _entries(tmp_path) == []  # no staging folder, no lock file, no dataset


def test_overwrite_on_full_disk_keeps_the_old_dataset(tmp_path, monkeypatch):
    with ShardWriter(tmp_path / "d.chute", {"x": "bytes"}) as w:
        for i in range(5):
            w.write({"x": bytes([i]) * 10})
    old = _tree(tmp_path / "d.chute")
    _FullDisk(monkeypatch, budget=100)
    with pytest.raises(DiskFullError):
        with ShardWriter(tmp_path / "d.chute", {"x": "bytes"}, overwrite=True) as w:
            for i in range(50):
                w.write({"x": bytes([i]) * 50})
    assert _entries(tmp_path) == ["d.chute"]
    assert _tree(tmp_path / "d.chute") == old
    assert verify_dataset(tmp_path / "d.chute") == []


def test_manifest_write_on_full_disk(tmp_path, monkeypatch):
    """The samples fit; the last shard's index and the manifest (written at close) do not."""
    disk = _FullDisk(monkeypatch, budget=10**6)
    with pytest.raises(DiskFullError, match="no space left on device"):
        with ShardWriter(tmp_path / "d.chute", {"x": "bytes"}) as w:
            for i in range(10):
                w.write({"x": bytes([i]) * 100})
            disk.budget = 0
    assert _entries(tmp_path) == []


@pytest.mark.parametrize("kind", ["imagefolder", "zarr"])
def test_cli_convert_on_full_disk_one_line_nothing_left(tmp_path, monkeypatch, capsys, kind):
    if kind == "zarr":
        pytest.importorskip("zarr")
        from tests.readers._zarr_stores import latents_values, write_store

        src = write_store(tmp_path / "x.zarr", latents_values(70, 9, seed=5), chunk=16)
        extra = ["--sample-array", "base_frames", "--shard-size", "2KiB"]
    else:
        src = tmp_path / "src"
        make_imagefolder(src, bad=False)
        extra = ["--shard-size", "3KB", "--workers", "1", "--no-progress"]
    before = set(_entries(tmp_path))
    _FullDisk(monkeypatch, budget=2500)
    dst = tmp_path / "out.chute"
    assert main(["convert", kind, str(src), str(dst), *extra]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{dst}: no space left on device while writing" in err
    assert "free space or write elsewhere" in err
    assert set(_entries(tmp_path)) == before  # no staging folder, no dataset


def test_cli_turns_any_enospc_into_one_line(tmp_path, monkeypatch, capsys):
    """An ENOSPC from a write chute does not wrap (here: the skipped-files report) is one line
    on stderr and exit 1, not a traceback."""
    import chute._cli.info as info

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "report.tsv"))

    monkeypatch.setattr(info, "run", full)
    dataset = converted_imagefolder(tmp_path)
    capsys.readouterr()
    code = main(["info", str(dataset)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == (f"chute info: error: {tmp_path / 'report.tsv'}: no space left on "
                           "device while writing it; free space or write elsewhere")


@pytest.fixture
def dataset(tmp_path):
    return converted_imagefolder(tmp_path)


def _jsonl(path, dataset):
    ds = open_dataset(dataset)
    keys = [ds[i]["meta"]["key"] for i in range(len(ds))]
    path.write_text("".join(json.dumps({"key": k, "caption": "x" * 400}) + "\n" for k in keys))
    return path


@pytest.mark.parametrize("budget", [0, 1500, 10**6])
def test_meta_update_on_full_disk_keeps_the_dataset(tmp_path, monkeypatch, dataset, budget):
    """budget 0: the first shard fails; 1500: some shards' new files were committed first;
    10**6: every shard is written and the manifest fails."""
    updates = _jsonl(tmp_path / "u.jsonl", dataset)
    old = _tree(dataset)
    disk = _FullDisk(monkeypatch, budget=budget)
    if budget == 10**6:
        from chute.readers.format import _manifest

        real = _manifest.atomic_write_bytes

        def manifest_full(path, data):
            disk.budget = 0
            return real(path, data)

        monkeypatch.setattr(_manifest, "atomic_write_bytes", manifest_full)
    with pytest.raises(DiskFullError) as caught:
        update_metadata(dataset, updates)
    assert disk.failed
    message = str(caught.value)
    assert message.startswith(f"{dataset}: no space left on device while writing the metadata")
    assert "\n" not in message
    assert _tree(dataset) == old  # no .meta.1.bin.tmp-PID, no meta.1.* files
    assert verify_dataset(dataset) == []


def test_cli_meta_update_on_full_disk(tmp_path, monkeypatch, dataset, capsys):
    updates = _jsonl(tmp_path / "u.jsonl", dataset)
    old = _tree(dataset)
    _FullDisk(monkeypatch, budget=1500)
    capsys.readouterr()
    assert main(["meta", "update", str(dataset), str(updates)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "no space left on device" in err
    assert _tree(dataset) == old


def test_meta_update_removes_what_a_killed_update_left(tmp_path, dataset):
    """A killed update leaves temporary files and unlisted generation files in the shards;
    the next update removes them (nothing else would)."""
    shard = sorted(p for p in dataset.iterdir() if p.is_dir())[0]
    (shard / ".meta.1.bin.tmp-4242").write_bytes(b"x" * 100)
    (shard / "meta.1.idx").write_bytes(b"stale")
    updates = _jsonl(tmp_path / "u.jsonl", dataset)
    update_metadata(dataset, updates)
    assert not (shard / ".meta.1.bin.tmp-4242").exists()
    ds = open_dataset(dataset)
    listed = {name for s in ds.manifest["shards"] for name in s["files"]}
    assert set(_entries(shard)) <= listed
    assert ds[0]["meta"]["caption"] == "x" * 400
    assert verify_dataset(dataset) == []
