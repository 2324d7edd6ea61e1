"""`chute convert hf` on a real Hugging Face `datasets` dataset saved to disk: images, class
labels with their names, other columns as metadata."""

from __future__ import annotations

import io

import numpy as np
import pytest

from chute.cli import main
from chute.readers import open_dataset

datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")


def _png(value: int, size=(9, 7)) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def test_convert_hf_saved_dataset(tmp_path, capsys):
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["cat", "dog"]),
                                  "caption": datasets.Value("string")})
    table = datasets.Dataset.from_dict(
        {"image": [{"bytes": _png(10 * i), "path": None} for i in range(5)],
         "label": [i % 2 for i in range(5)],
         "caption": [f"picture {i}" for i in range(5)]}, features=features)
    table.save_to_disk(str(tmp_path / "saved"))
    dst = tmp_path / "hf.chute"
    assert main(["convert", "hf", str(tmp_path / "saved"), str(dst)]) == 0
    ds = open_dataset(dst)
    assert len(ds) == 5 and list(ds.class_names) == ["cat", "dog"]
    for i in range(5):
        sample = ds[i]
        assert sample["label"] == i % 2 and sample["meta"]["caption"] == f"picture {i}"
        pixels = np.asarray(Image.open(io.BytesIO(bytes(sample["image"]))).convert("RGB"))
        assert pixels.shape == (7, 9, 3) and (pixels == 10 * i).all()
    assert main(["convert", "hf", str(tmp_path / "saved"), str(tmp_path / "y.chute"),
                 "--image-column", "picture"]) == 1
    assert "no column 'picture'" in capsys.readouterr().err


def test_convert_hf_stores_jpeg_bytes_as_they_are(tmp_path):
    """A JPEG image column is read undecoded: the bytes are stored unchanged, not decoded by
    `datasets` and re-encoded."""
    buffer = io.BytesIO()
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (12, 20, 3), dtype=np.uint8)).save(buffer, "JPEG",
                                                                             quality=80)
    jpeg = buffer.getvalue()
    table = datasets.Dataset.from_dict({"image": [{"bytes": jpeg, "path": None}]},
                                       features=datasets.Features({"image": datasets.Image()}))
    table.save_to_disk(str(tmp_path / "saved"))
    assert main(["convert", "hf", str(tmp_path / "saved"), str(tmp_path / "hf.chute")]) == 0
    sample = open_dataset(tmp_path / "hf.chute")[0]
    assert bytes(sample["image"]) == jpeg and (sample["height"], sample["width"]) == (12, 20)
