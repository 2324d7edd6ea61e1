"""`chute convert litdata` (chute/convert/_litdata.py): litdata datasets written by the
real `BinaryWriter` and `litdata.optimize` with every leaf type that maps to a chute kind
(JPEG and PIL images, image files, int, float, bool, str, bytes, NumPy arrays and tensors of
every rank, nested dicts and lists), uncompressed and with each zstd level (chunk, batch,
sample), converted, and every sample compared with what litdata's own StreamingDataset
returns; a pickled leaf refused in one line naming it (never unpickled), --drop; a
hand-written fixture of the documented layout (no litdata needed)."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from chute.cli import main
from chute.convert import ConvertOptions, LitdataJob, convert_litdata
from chute.errors import FormatError
from chute.readers import open_dataset, verify_dataset
from tests.convert._peers import (
    decoded,
    import_litdata,
    jpeg_bytes,
    start_method_kept,
    write_litdata_layout,
)

OPTIONS = ConvertOptions(progress=False, shard_size="2KB")
N = 9


class _Unpicklable:
    pass


def _row(i: int, image_dir: Path | None = None) -> dict:
    import torch
    from PIL import Image

    rng = np.random.default_rng(i)
    row = {
        "jpeg": Image.open(io.BytesIO(jpeg_bytes(i))),
        "pil": Image.fromarray(rng.integers(0, 255, (5, 6, 3), dtype=np.uint8)),
        "label": i - 3,
        "score": i / 7,
        "flag": bool(i % 2),
        "text": f"row {i} ✓",
        "raw": bytes(rng.integers(0, 255, i + 1, dtype=np.uint8)),
        "grid": rng.standard_normal((i % 3 + 1, 2)).astype(np.float32),
        "ids": rng.integers(0, 1000, i + 2).astype(np.int32),
        "weights": torch.arange(6, dtype=torch.float64).reshape(3, 2) * i,
        "steps": torch.arange(i + 1, dtype=torch.int64),
        "meta": {"id": i, "tags": ["a", "b"][: i % 3], "pos": [float(i), 0.5]},
    }
    if image_dir is not None:  # an image file, stored by litdata's ImageSerializer
        path = image_dir / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8)).save(path)
        row["file"] = str(path)
    return row


def _write(folder: Path, rows: list[dict], **kwargs) -> Path:
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(folder), chunk_bytes="2KB", **kwargs)
    for i, row in enumerate(rows):
        writer[i] = row
    writer.done()
    writer.merge()
    return folder


def _theirs(folder: Path) -> list:
    """Every sample as litdata's StreamingDataset returns it, with its image leaves as the
    bytes litdata stored: its own image decoder needs torchvision, which the tests do not
    install (torch stays the pinned CPU build)."""
    import litdata
    from litdata.streaming.serializers import BytesSerializer

    class StoredBytes(BytesSerializer):
        def deserialize(self, item):
            return bytes(item)

    copy = folder.parent / (folder.name + "-read")
    shutil.copytree(folder, copy)
    images = {name: StoredBytes() for name in ("jpeg", "image", "image:png", "image:jpg")}
    dataset = litdata.StreamingDataset(input_dir=str(copy), serializers=images)
    return [dataset[i] for i in range(len(dataset))]


def _flat(sample: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in sample.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _assert_same(ours, theirs: list[dict], formats: dict[str, str]) -> None:
    import torch

    assert len(ours) == len(theirs)
    for i, want in enumerate(theirs):
        got, want = ours[i], _flat(want)
        assert set(formats) <= set(want)
        for name, fmt in formats.items():
            value, expected = got[name], want[name]
            if fmt == "jpeg":  # stored byte for byte
                assert bytes(np.asarray(value, np.uint8)) == expected, (i, name)
            elif fmt == "pil" or fmt.startswith("image:"):  # transcoded at quality 100, 4:4:4
                pixels = decoded(expected) if isinstance(expected, bytes) else np.asarray(expected)
                assert decoded(value).shape == pixels.shape, (i, name)
                assert np.abs(decoded(value).astype(int) - pixels.astype(int)).max() <= 8
            elif fmt == "bytes":
                assert bytes(np.asarray(value, np.uint8)) == bytes(expected)
            elif isinstance(expected, (torch.Tensor, np.ndarray)):
                expected = expected.numpy() if isinstance(expected, torch.Tensor) else expected
                assert np.asarray(value).dtype == expected.dtype, (i, name)
                assert np.array_equal(value, expected), (i, name)
            else:  # int, float, bool, str, json leaves
                assert value == expected, (i, name, value, expected)
                assert type(np.asarray(value).item() if isinstance(value, np.generic)
                            else value) is type(expected), (i, name)


@pytest.mark.parametrize("compression", [
    {}, {"compression": "zstd"}, {"compression": "zstd", "compression_level": "chunk"},
    {"compression": "zstd", "compression_level": "sample"}, {"compression": "zstd:9"}],
    ids=["raw", "zstd-batch", "zstd-chunk", "zstd-sample", "zstd9"])
@pytest.mark.slow  # litdata's reader takes seconds (docs/testing.md)
def test_every_litdata_leaf_converts_to_what_litdata_reads(compression, tmp_path):
    import_litdata()
    images = tmp_path / "images"
    images.mkdir()
    src = _write(tmp_path / "lit", [_row(i, images) for i in range(N)], **compression)
    index = json.loads((src / "index.json").read_text())
    formats = dict(zip(
        [n for n in LitdataJob(src, OPTIONS).names], index["config"]["data_format"],
        strict=True))
    assert {"jpeg", "pil", "int", "float", "bool", "str", "bytes", "numpy", "tensor",
            "json"} <= set(formats.values())
    assert "no_header_numpy:2" in formats.values() and "image:png" in formats.values()
    assert len(index["chunks"]) > 2
    report = convert_litdata(src, tmp_path / "out.chute", OPTIONS)
    assert report.written == N and not report.skipped
    assert report.actions == {"stored": N, "transcoded": 2 * N}
    assert verify_dataset(tmp_path / "out.chute") == []
    ours = open_dataset(tmp_path / "out.chute")
    assert ours.manifest["source"]["kind"] == "litdata"
    assert ours.manifest["fields"]["jpeg"]["media"] == "image"
    _assert_same(ours, _theirs(src), formats)


@pytest.mark.slow  # litdata.optimize starts worker processes
def test_optimize_output_converts_in_order(tmp_path):
    litdata = import_litdata()

    with start_method_kept():
        litdata.optimize(fn=_optimized, inputs=list(range(12)),
                         output_dir=str(tmp_path / "opt"), chunk_bytes="1KB", num_workers=1,
                         mode="overwrite")
    report = convert_litdata(tmp_path / "opt", tmp_path / "out.chute", OPTIONS)
    assert report.written == 12
    ours = open_dataset(tmp_path / "out.chute")
    formats = {"image": "jpeg", "class": "int", "emb": "numpy"}
    _assert_same(ours, _theirs(tmp_path / "opt"), formats)
    assert [int(ours[i]["class"]) for i in range(12)] == list(range(12))


def _optimized(i: int) -> dict:
    from PIL import Image

    return {"image": Image.open(io.BytesIO(jpeg_bytes(i))), "class": i,
            "emb": np.full((2, 3), i, np.float16)}


def test_a_pickled_leaf_is_refused_in_one_line_and_converts_without_it(tmp_path):
    import_litdata()
    src = _write(tmp_path / "lit", [{"label": i, "obj": _Unpicklable()} for i in range(3)])
    with pytest.raises(FormatError, match=r"column 'obj' is pickled .*--drop obj") as info:
        convert_litdata(src, tmp_path / "out.chute", OPTIONS)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out.chute").exists()
    convert_litdata(src, tmp_path / "out.chute", OPTIONS, drop=["obj"])
    ours = open_dataset(tmp_path / "out.chute")
    assert [int(ours[i]["label"]) for i in range(3)] == [0, 1, 2]


def test_the_cli_converts_and_the_job_pickles(tmp_path, capsys):
    import_litdata()
    src = _write(tmp_path / "lit", [_row(i) for i in range(4)], compression="zstd")
    job = LitdataJob(src, OPTIONS)
    assert pickle.loads(pickle.dumps(job)).units == job.units  # what --engine ray ships
    dst = tmp_path / "cli.chute"
    assert main(["convert", "litdata", str(src), str(dst), "--no-progress", "--json",
                 "--drop", "meta.tags"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 4
    fields = open_dataset(dst).manifest["fields"]
    assert "meta.tags" not in fields and "meta.id" in fields


# -- without litdata: the documented layout, written by hand -------------------------------------
FORMATS = {"image": "jpeg", "label": "int", "score": "float", "caption": "str", "raw": "bytes",
           "emb": "numpy", "meta": "json"}


def _layout_rows(n: int) -> list[dict]:
    return [{"image": jpeg_bytes(i), "label": i, "score": i / 4, "caption": f"c{i}",
             "raw": b"x" * i, "emb": np.full((2, 2), i, np.float32), "meta": {"k": [i]}}
            for i in range(n)]


def test_the_documented_layout_converts_without_litdata(tmp_path):
    rows = _layout_rows(7)
    src = write_litdata_layout(tmp_path / "lit", rows, FORMATS)
    report = convert_litdata(src, tmp_path / "out.chute", OPTIONS)
    assert report.written == 7 and report.actions == {"stored": 7}
    ours = open_dataset(tmp_path / "out.chute")
    for i, row in enumerate(rows):
        got = ours[i]
        assert bytes(np.asarray(got["image"], np.uint8)) == row["image"]
        assert int(got["label"]) == i and float(got["score"]) == i / 4
        assert got["caption"] == row["caption"] and got["meta"] == row["meta"]
        assert bytes(np.asarray(got["raw"], np.uint8)) == row["raw"]
        assert np.array_equal(got["emb"], row["emb"])


def test_an_unmappable_leaf_and_a_corrupt_chunk_are_errors_naming_them(tmp_path):
    src = write_litdata_layout(tmp_path / "lit", _layout_rows(6), FORMATS)
    index = json.loads((src / "index.json").read_text())
    index["config"]["data_format"][3] = "video"
    (src / "index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match=r"column 'caption' is litdata 'video'.*--drop caption"):
        convert_litdata(src, tmp_path / "out.chute", OPTIONS)
    index["config"]["data_format"][3] = "str"
    (src / "index.json").write_text(json.dumps(index))
    chunk = src / "chunk-0-1.bin"
    chunk.write_bytes(chunk.read_bytes()[:-50])
    with pytest.raises(FormatError, match=r"chunk-0-1\.bin"):
        convert_litdata(src, tmp_path / "out.chute", OPTIONS)
    assert not (tmp_path / "out.chute").exists()
