"""write_dataset(iterable, path) and the flat image folder convert."""

import io

import numpy as np
import pytest
from PIL import Image

from chute.cli import main
from chute.convert import write_dataset
from chute.errors import FormatError
from chute.readers import open_dataset
from tests.readers._images import jpeg_bytes


def test_write_dataset_from_a_generator(tmp_path):
    def samples():
        for i in range(5):
            image = jpeg_bytes(20 + i, 16, seed=i)
            if i == 3:  # a PNG and a PIL image are stored as JPEG
                out = io.BytesIO()
                Image.new("RGB", (20 + i, 16), (i, 0, 0)).save(out, format="PNG")
                image = out.getvalue()
            elif i == 4:
                image = Image.new("RGB", (20 + i, 16), (0, i, 0))
            yield {"image": image, "label": i, "caption": f"sample {i}"}

    ds = write_dataset(samples(), tmp_path / "gen.chute", shard_size="1KB")
    assert len(ds) == 5 and ds.specs["image"]["media"] == "image"
    assert ds[1]["label"] == 1 and ds[1]["caption"] == "sample 1"
    assert [int(ds[i]["width"]) for i in range(5)] == [20, 21, 22, 23, 24]
    assert bytes(ds[0]["image"]) == jpeg_bytes(20, 16, seed=0)


def test_write_dataset_refuses_empty_and_unreadable(tmp_path):
    with pytest.raises(FormatError, match="no samples"):
        write_dataset([], tmp_path / "empty.chute")
    with pytest.raises(FormatError, match="sample 1"):
        write_dataset([{"image": jpeg_bytes(8, 8)}, {"image": b"not an image"}],
                      tmp_path / "bad.chute")


def test_convert_a_flat_folder_has_no_labels(tmp_path):
    src = tmp_path / "flat"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(jpeg_bytes(12, 10, seed=i))
    dst = tmp_path / "flat.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--no-progress",
                 "--workers", "1"]) == 0
    ds = open_dataset(dst)
    assert len(ds) == 3 and "label" not in ds.fields and not ds.class_names
    assert sorted(ds[i]["meta"]["key"] for i in range(3)) == ["0.jpg", "1.jpg", "2.jpg"]
    assert np.asarray(ds[0]["height"]) == 10


def test_write_dataset_of_a_hf_dataset_keeps_jpegs_and_class_names(tmp_path):
    """Issue 26 item 4: write_dataset(hf_dataset) decoded and re-encoded every JPEG (2.4x
    larger, a second lossy generation) and dropped the ClassLabel names `convert hf` keeps."""
    datasets = pytest.importorskip("datasets")
    jpegs = [jpeg_bytes(20, 12, seed=i) for i in range(3)]
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["cat", "dog"]),
                                  "caption": datasets.Value("string")})
    table = datasets.Dataset.from_dict(
        {"image": [{"bytes": j, "path": None} for j in jpegs], "label": [0, 1, 1],
         "caption": ["a", "b", "c"]}, features=features)
    ds = write_dataset(table, tmp_path / "hf.chute")
    assert list(ds.class_names) == ["cat", "dog"]
    assert [bytes(ds[i]["image"]) for i in range(3)] == jpegs
    assert [int(ds[i]["label"]) for i in range(3)] == [0, 1, 1]
    assert ds[2]["caption"] == "c" and (int(ds[0]["height"]), int(ds[0]["width"])) == (12, 20)
