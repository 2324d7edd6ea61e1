import json

import pytest

from chute.cli import main
from tests.readers._images import converted_imagefolder


@pytest.fixture
def dataset(tmp_path):
    return converted_imagefolder(tmp_path)


def test_info_json(dataset, capsys):
    capsys.readouterr()
    assert main(["info", str(dataset), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == 8 and info["shards"] > 1 and info["class_names"] == ["cat", "dog"]
    assert info["fields"]["image"] == "bytes" and info["fields"]["label"] == "scalar"
    sizes = info["bytes"]
    payload = sum(p.stat().st_size for p in dataset.glob("*/image.bin"))
    index = sum(p.stat().st_size for p in dataset.glob("*/*.idx"))
    columns = sum(p.stat().st_size for p in dataset.glob("*/*.npy"))
    assert (sizes["payload"], sizes["index"], sizes["columns"]) == (payload, index, columns)
    assert info["overhead_pct"] == pytest.approx(100 * (index + columns) / payload)


def test_info_text(dataset, capsys):
    assert main(["info", str(dataset)]) == 0
    out = capsys.readouterr().out
    assert "samples     8" in out and "overhead" in out and "% of payload" in out


def test_verify_ok(dataset, capsys):
    assert main(["verify", str(dataset), "--no-progress"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["image.bin", "meta.bin", "label.npy", "image.idx"])
def test_verify_flipped_byte(dataset, capsys, name):
    path = sorted(dataset.glob(f"*/{name}"))[-1]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    assert main(["verify", str(dataset), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: checksum mismatch" in err


def test_verify_missing_and_truncated(dataset, capsys):
    shards = sorted(p for p in dataset.iterdir() if p.is_dir())
    (shards[0] / "width.npy").unlink()
    bin_path = shards[1] / "image.bin"
    bin_path.write_bytes(bin_path.read_bytes()[:-1])
    assert main(["verify", str(dataset), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{shards[0] / 'width.npy'}: missing" in err and f"{bin_path}: size" in err


def test_verify_not_a_dataset(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 1
    assert "no chute.json" in capsys.readouterr().err
