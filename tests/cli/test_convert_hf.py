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


def _jpeg(seed: int, size=(20, 12)) -> bytes:
    buffer = io.BytesIO()
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        buffer, "JPEG", quality=80)
    return buffer.getvalue()


def _saved(tmp_path, *, splits=None, label=None):
    """A dataset saved to disk: 3 rows of JPEG images (+ label column), one Dataset or a
    DatasetDict of `splits`."""
    columns = {"image": datasets.Image()}
    if label is not None:
        columns["label"] = label
    values = {"image": [{"bytes": _jpeg(i), "path": None} for i in range(3)]}
    if label is not None:
        values["label"] = ["a", "b", "a"] if label.dtype == "string" else [0, 1, 0]
    table = datasets.Dataset.from_dict(values, features=datasets.Features(columns))
    if splits:
        table = datasets.DatasetDict({name: table for name in splits})
    table.save_to_disk(str(tmp_path / "saved"))
    return str(tmp_path / "saved")


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_split_that_is_not_there_is_refused(tmp_path, capsys):
    """Issue 26 items 4 and 6: --split on a saved dataset without splits wrote every row;
    a missing split of a DatasetDict was a raw KeyError."""
    plain = _saved(tmp_path)
    capsys.readouterr()  # datasets' progress bars
    assert main(["convert", "hf", plain, str(tmp_path / "a.chute"), "--split",
                 "validation"]) == 1
    assert "without splits" in _one_line_error(capsys)
    assert not (tmp_path / "a.chute").exists()
    assert main(["convert", "hf", plain, str(tmp_path / "b.chute")]) == 0  # no --split: all
    (tmp_path / "saved2").mkdir()
    split = _saved(tmp_path / "saved2", splits=["train", "validation"])
    capsys.readouterr()
    assert main(["convert", "hf", split, str(tmp_path / "c.chute"), "--split", "test"]) == 1
    assert "no split 'test'" in _one_line_error(capsys)
    assert main(["convert", "hf", split, str(tmp_path / "d.chute"), "--split",
                 "validation"]) == 0


def test_a_string_label_column_is_refused(tmp_path, capsys):
    """Issue 26 item 6: --label-column naming a string column was a raw ValueError."""
    saved = _saved(tmp_path, label=datasets.Value("string"))
    capsys.readouterr()
    assert main(["convert", "hf", saved, str(tmp_path / "a.chute")]) == 1
    assert "label column 'label' holds string" in _one_line_error(capsys)
    assert main(["convert", "hf", saved, str(tmp_path / "b.chute"), "--label-column",
                 ""]) == 0
    assert "label" not in open_dataset(tmp_path / "b.chute").fields


@pytest.mark.parametrize("name", ["absolute", "data/savd", "./savd"])
def test_a_mistyped_local_folder_fails_fast_naming_it(tmp_path, capsys, monkeypatch, name):
    """Issue 26 item 6: a mistyped folder went to the Hub, retried for 26 s and printed a
    38-line ConnectionError. A path-like name that is no folder never asks the Hub."""
    import time

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    name = str(tmp_path / "savd") if name == "absolute" else name
    start = time.monotonic()
    assert main(["convert", "hf", name, str(tmp_path / "a.chute")]) == 1
    assert time.monotonic() - start < 5
    err = _one_line_error(capsys)
    assert f"{name}: no such folder" in err


def test_an_unreachable_hub_fails_at_once(tmp_path, capsys, monkeypatch):
    """A Hub name when the Hub cannot be reached: one line at once, not 26 s of retries."""
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused
    start = time.monotonic()
    assert main(["convert", "hf", "savd", str(tmp_path / "a.chute")]) == 1
    assert time.monotonic() - start < 5
    assert "savd: not a local folder, and the Hugging Face Hub" in _one_line_error(capsys)


def test_options_that_do_not_apply_are_refused(tmp_path, capsys):
    """Issue 26 item 4: options `convert hf` does not apply were silently ignored."""
    saved = _saved(tmp_path)
    capsys.readouterr()
    assert main(["convert", "hf", saved, str(tmp_path / "a.chute"), "--max-side", "64"]) == 1
    assert "--max-side does not apply" in _one_line_error(capsys)
    assert not (tmp_path / "a.chute").exists()
