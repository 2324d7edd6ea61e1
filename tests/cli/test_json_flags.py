"""--version, --json on verify / convert / meta update / bench, and a Megatron verify that does
not claim checksums it does not have."""

import csv
import json

import numpy as np
import pytest

from chute import __version__
from chute.cli import main
from tests.readers._images import converted_imagefolder, jpeg_bytes
from tests.readers.test_megatron import write_megatron_pair


@pytest.fixture
def dataset(tmp_path):
    return converted_imagefolder(tmp_path)


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"chute {__version__}"


def test_verify_json(dataset, capsys):
    capsys.readouterr()
    assert main(["verify", str(dataset), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(dataset), "ok": True,
                                                   "checksums": True, "problems": []}
    (next(dataset.glob("*/label.npy"))).write_bytes(b"x")
    assert main(["verify", str(dataset), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert not result["ok"] and "label.npy" in result["problems"][0]


def test_verify_megatron_says_there_are_no_checksums(tmp_path, capsys):
    write_megatron_pair(tmp_path / "corpus", [np.arange(5, dtype=np.uint16)])
    assert main(["verify", str(tmp_path / "corpus")]) == 0
    out = capsys.readouterr().out
    assert "no checksums" in out and "every checksum matches" not in out


def test_info_text_names_the_classes(dataset, capsys):
    assert main(["info", str(dataset)]) == 0
    assert "2 (cat, dog)" in capsys.readouterr().out


def test_convert_json_and_an_empty_result_fails(tmp_path, capsys):
    src = tmp_path / "images"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(jpeg_bytes(24, 20, seed=i))
    table = tmp_path / "list.csv"
    with table.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows([[f"images/{i}.jpg", i] for i in range(3)])
    capsys.readouterr()
    assert main(["convert", "csv", str(table), str(tmp_path / "a.chute"), "--json",
                 "--no-progress"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["written"] == 3 and result["skipped"] == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("path,label\n" + "".join(f"nowhere/{i}.jpg,{i}\n" for i in range(4)))
    assert main(["convert", "csv", str(bad), str(tmp_path / "b.chute"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "no sample was stored" in err and "CSV's folder" in err


def test_meta_update_json(dataset, tmp_path, capsys):
    from chute.readers import open_dataset

    key = open_dataset(dataset)[0]["meta"]["key"]
    lines = tmp_path / "m.jsonl"
    lines.write_text(json.dumps({"key": key, "caption": "a cat"}) + "\n")
    capsys.readouterr()
    assert main(["meta", "update", str(dataset), str(lines), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(dataset), "updated": 1,
                                                   "unmatched": [], "dropped_segments": []}
