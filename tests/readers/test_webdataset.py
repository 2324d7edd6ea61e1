"""WebDataset tar shards -> samples (and `chute convert webdataset`)."""

import io
import json
import tarfile

import pytest

from chute.cli import main
from chute.errors import FormatError
from chute.readers import open_dataset
from chute.readers.convert._webdataset import iter_webdataset
from tests.readers._images import jpeg_bytes


def write_tar(path, members):
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def shard(path, first, n):
    members = []
    for i in range(first, first + n):
        members += [(f"s/{i:05d}.jpg", jpeg_bytes(16, 12, seed=i)), (f"s/{i:05d}.cls", b"%d" % i),
                    (f"s/{i:05d}.json", json.dumps({"source": "web"}).encode()),
                    (f"s/{i:05d}.txt", b"a caption")]
    return write_tar(path, members)


def test_samples_of_two_shards(tmp_path):
    tars = [shard(tmp_path / "a.tar", 0, 3), shard(tmp_path / "b.tar", 3, 2)]
    samples = list(iter_webdataset(tars))
    assert [s["label"] for s in samples] == [0, 1, 2, 3, 4]
    assert samples[4]["meta"] == {"key": "s/00004", "source": "web", "text": "a caption"}
    assert samples[0]["image"] == jpeg_bytes(16, 12, seed=0)


def test_convert_webdataset(tmp_path, capsys):
    tars = [shard(tmp_path / "a.tar", 0, 3), shard(tmp_path / "b.tar", 3, 2)]
    dst = tmp_path / "web.chute"
    assert main(["convert", "webdataset", *map(str, tars), str(dst), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 5
    ds = open_dataset(dst)
    assert len(ds) == 5 and ds[2]["label"] == 2 and int(ds[2]["height"]) == 12


def test_a_sample_without_image_or_a_foreign_file_is_named(tmp_path):
    bad = write_tar(tmp_path / "bad.tar", [("x/1.cls", b"1")])
    with pytest.raises(FormatError, match="no image member"):
        list(iter_webdataset([bad]))
    (tmp_path / "not.tar").write_bytes(b"hello")
    with pytest.raises(FormatError, match="not a readable tar"):
        list(iter_webdataset([tmp_path / "not.tar"]))


def test_convert_hf_without_datasets_says_what_to_install(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    assert main(["convert", "hf", "some/name", str(tmp_path / "x.chute")]) == 1
    assert "pip install datasets" in capsys.readouterr().err
