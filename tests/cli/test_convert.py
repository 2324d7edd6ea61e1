import csv

import numpy as np
import pytest

from chute.cli import main
from chute.readers import open_dataset
from tests.readers._images import jpeg_bytes, make_imagefolder, png_bytes


@pytest.fixture
def folder(tmp_path):
    src = tmp_path / "src"
    return src, make_imagefolder(src)


def test_imagefolder(tmp_path, folder, capsys):
    src, files = folder
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--workers", "2",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "skipped 3 unreadable images" in printed and "1 transcoded" in printed
    report = (dst / "skipped.tsv").read_text()
    for rel in ("cat/half.jpg", "dog/no_eoi.jpg", "dog/foreign.jpg"):
        assert rel in report
    ds = open_dataset(dst)
    good = {rel: f for rel, f in files.items() if f["ok"]}
    assert len(ds) == len(good) == 8
    assert ds.class_names == ["cat", "dog"]
    assert ds.column("label").dtype == np.int64
    assert ds.manifest["source"]["transcoded"] == 1 and ds.manifest["source"]["skipped"] == 3
    for i in range(len(ds)):
        sample = ds[i]
        expected = good[sample["meta"]["key"]]
        assert sample["label"] == expected["label"]
        assert (sample["height"], sample["width"]) == expected["size"]
        if expected["kind"] == "stored":
            assert sample["image"].tobytes() == expected["bytes"]
        else:
            assert sample["image"][:2].tobytes() == b"\xff\xd8"
    keys = [ds[i]["meta"]["key"] for i in range(len(ds))]
    assert keys == sorted(keys)  # deterministic order: class, then path


def test_strict_fails_naming_the_file(tmp_path, folder, capsys):
    src, _ = folder
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--strict", "--workers", "1",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "half.jpg" in err and "truncated" in err and "--strict" in err
    assert not (dst / "chute.json").exists()


def test_shard_size_and_max_side(tmp_path):
    src = tmp_path / "src"
    make_imagefolder(src, bad=False)
    (src / "cat" / "big.jpg").write_bytes(jpeg_bytes(300, 120, seed=3))
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--shard-size", "2KB",
                 "--max-side", "100", "--quality", "80", "--workers", "1",
                 "--no-progress"]) == 0
    ds = open_dataset(dst)
    assert len(ds.manifest["shards"]) > 2
    assert int(np.maximum(ds.column("height"), ds.column("width")).max()) == 100
    big = next(i for i in range(len(ds)) if ds[i]["meta"]["key"] == "cat/big.jpg")
    assert (ds[big]["height"], ds[big]["width"]) == (40, 100)


def test_existing_destination_needs_overwrite(tmp_path):
    src = tmp_path / "src"
    make_imagefolder(src, bad=False)
    dst = tmp_path / "out.chute"
    args = ["convert", "imagefolder", str(src), str(dst), "--workers", "1", "--no-progress"]
    assert main(args) == 0
    assert main(args) == 1
    assert main([*args, "--overwrite"]) == 0


def test_csv(tmp_path, capsys):
    (tmp_path / "imgs").mkdir()
    rows = []
    for k in range(5):
        name = f"imgs/{k}.jpg" if k != 4 else "imgs/4.png"
        data = jpeg_bytes(20 + k, 10, seed=k) if k != 4 else png_bytes(9, 7)
        (tmp_path / name).write_bytes(data)
        rows.append({"path": name, "label": ["bird", "ant"][k % 2], "text": f"caption {k}",
                     "source": "test"})
    rows.append({"path": "imgs/missing.jpg", "label": "ant", "text": "", "source": "test"})
    table = tmp_path / "list.csv"
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "label", "text", "source"])
        writer.writeheader()
        writer.writerows(rows)
    dst = tmp_path / "out.chute"
    assert main(["convert", "csv", str(table), str(dst), "--workers", "1", "--no-progress"]) == 0
    assert "skipped 1 unreadable" in capsys.readouterr().out
    ds = open_dataset(dst)
    assert len(ds) == 5 and ds.class_names == ["ant", "bird"]
    for k in range(4):
        assert ds[k]["image"].tobytes() == (tmp_path / rows[k]["path"]).read_bytes()
        assert ds[k]["meta"] == {"key": rows[k]["path"], "text": f"caption {k}",
                                 "source": "test"}
        assert ds[k]["label"] == (1 if k % 2 == 0 else 0)
    assert (ds[4]["height"], ds[4]["width"]) == (7, 9)


def test_csv_without_label_column(tmp_path):
    (tmp_path / "a.jpg").write_bytes(jpeg_bytes(10, 10))
    (tmp_path / "list.csv").write_text("path,text\na.jpg,hello\n")
    dst = tmp_path / "out.chute"
    assert main(["convert", "csv", str(tmp_path / "list.csv"), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    ds = open_dataset(dst)
    assert "label" not in ds.fields and ds[0]["meta"] == {"key": "a.jpg", "text": "hello"}


def test_csv_without_path_column(tmp_path, capsys):
    (tmp_path / "list.csv").write_text("file,label\na.jpg,1\n")
    assert main(["convert", "csv", str(tmp_path / "list.csv"), str(tmp_path / "o"),
                 "--no-progress"]) == 1
    assert "needs a `path` column" in capsys.readouterr().err


def test_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        main(["convert", "imagefolder", "--help"])
    out = capsys.readouterr().out
    for option in ("--shard-size", "--workers", "--max-side", "--quality", "--strict"):
        assert option in out


def test_real_jpegs_stored_byte_for_byte(tmp_path, shared_images):
    """The acceptance check on real ImageNet JPEGs (skipped where ../shared is absent)."""
    files = sorted(shared_images.glob("*.JPEG"))[:60]
    src = tmp_path / "src"
    for k, path in enumerate(files):
        (src / f"class{k % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"class{k % 3}" / path.name).symlink_to(path)
    dst = tmp_path / "real.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    ds = open_dataset(dst)
    assert len(ds) == len(files)
    for i in range(len(ds)):
        key = ds[i]["meta"]["key"]
        assert ds[i]["image"].tobytes() == (src / key).read_bytes()
        assert ds.class_names[ds[i]["label"]] == key.split("/")[0]
    assert main(["verify", str(dst), "--no-progress"]) == 0
    bin_path = next(dst.glob("*/image.bin"))
    raw = bytearray(bin_path.read_bytes())
    raw[12345] ^= 0xFF
    bin_path.write_bytes(bytes(raw))
    assert main(["verify", str(dst), "--no-progress"]) == 1


def test_csv_mixing_integer_and_name_labels_is_refused(tmp_path, capsys):
    """Issue 26 item 8: labels 0, 1 and "cat" quietly became class names ["0", "1", "cat"]."""
    for k in range(3):
        (tmp_path / f"{k}.jpg").write_bytes(jpeg_bytes(10, 10, seed=k))
    (tmp_path / "list.csv").write_text("path,label\n0.jpg,0\n1.jpg,1\n2.jpg,cat\n")
    dst = tmp_path / "out.chute"
    assert main(["convert", "csv", str(tmp_path / "list.csv"), str(dst), "--workers", "1",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "mixes integers and names" in err and "'cat'" in err and "'0'" in err
    assert not dst.exists()


def test_info_of_integer_labels_does_not_say_0_classes(tmp_path, capsys):
    """Issue 26 item 8: `chute info` printed "classes 0" for a dataset with integer labels."""
    for k in range(2):
        (tmp_path / f"{k}.jpg").write_bytes(jpeg_bytes(10, 10, seed=k))
    (tmp_path / "list.csv").write_text("path,label\n0.jpg,3\n1.jpg,7\n")
    dst = tmp_path / "out.chute"
    assert main(["convert", "csv", str(tmp_path / "list.csv"), str(dst), "--workers", "1",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["info", str(dst)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("classes"))
    assert line.split(None, 1)[1] == "no names (integer labels)"
