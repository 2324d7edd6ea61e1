"""`chute convert mds` (chute/convert/_mds.py): MosaicML Streaming datasets written by
the real `MDSWriter` with every column encoding that maps to a chute kind, raw and with every
shard compression, converted, and every sample compared with what streaming's own
StreamingDataset returns; pickled and list columns refused in one line naming them (never
unpickled), --drop; a hand-written fixture of the documented layout (no mosaicml-streaming
needed), a corrupt shard, and an s3:// source."""

from __future__ import annotations

import importlib.util
import json
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from chute.cli import main
from chute.convert import ConvertOptions, convert_mds
from chute.errors import FormatError
from chute.readers import open_dataset, verify_dataset
from tests.convert._peers import decoded, import_streaming, jpeg_bytes, write_mds_layout

OPTIONS = ConvertOptions(progress=False, shard_size="2KB")
SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16",
           "float32", "float64")
COLUMNS = {"jpeg": "jpeg", "png": "png", "pil": "pil", "raw": "bytes", "text": "str",
           "label": "int", "big": "str_int", "ratio": "str_float", "money": "str_decimal",
           "fixed": "ndarray:float32:2,3", "tokens": "ndarray:int16", "free": "ndarray",
           "meta": "json", **{f"s_{d}": d for d in SCALARS}}
N = 11


def _rows(n: int = N) -> list[dict]:
    from PIL import Image

    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        row = {
            "jpeg": Image.open(__import__("io").BytesIO(jpeg_bytes(i))),
            "png": Image.fromarray(rng.integers(0, 255, (6, 7, 3), dtype=np.uint8)),
            "pil": Image.fromarray(rng.integers(0, 255, (5, 4), dtype=np.uint8), mode="L"),
            "raw": bytes(rng.integers(0, 255, i, dtype=np.uint8)),
            "text": f"sample {i} ✓",
            "label": i * 7 - 20,
            "big": 2**62 + i,
            "ratio": i / 3,
            "money": Decimal(f"{i}.{i:02d}"),
            "fixed": rng.standard_normal((2, 3)).astype(np.float32),
            "tokens": rng.integers(-99, 99, i + 1).astype(np.int16),
            "free": rng.standard_normal((i % 3 + 1, 2)).astype(np.float64),
            "meta": {"i": i, "tags": ["a", "b"][: i % 3]},
        }
        for dtype in SCALARS:
            row[f"s_{dtype}"] = np.dtype(dtype).type(i + 1)
        rows.append(row)
    return rows


def _write(streaming, folder: Path, rows, columns=COLUMNS, compression=None,
           size_limit=1500) -> Path:
    with streaming.MDSWriter(out=str(folder), columns=columns, compression=compression,
                             size_limit=size_limit) as writer:
        for row in rows:
            writer.write(row)
    return folder


def _theirs(streaming, folder: Path) -> list[dict]:
    """Every sample as streaming's StreamingDataset returns it (read from a copy: it leaves
    decompressed shards beside the compressed ones)."""
    copy = folder.parent / (folder.name + "-read")
    shutil.copytree(folder, copy)
    dataset = streaming.StreamingDataset(local=str(copy), shuffle=False, batch_size=1)
    return [dataset[i] for i in range(len(dataset))]


def _assert_same(ours, theirs: list[dict], columns=COLUMNS) -> None:
    assert len(ours) == len(theirs)
    for i, want in enumerate(theirs):
        got = ours[i]
        for name, encoding in columns.items():
            value, expected = got[name], want[name]
            if encoding == "jpeg":  # stored byte for byte: the same pixels
                assert np.array_equal(decoded(value), np.asarray(expected)), (i, name)
                assert (int(got["height"]), int(got["width"])) == expected.size[::-1]
            elif encoding in ("png", "pil"):  # transcoded at quality 100, 4:4:4
                pixels = decoded(value).astype(int)
                assert pixels.shape == np.asarray(expected).shape, (i, name)
                assert np.abs(pixels - np.asarray(expected, int)).max() <= 8, (i, name)
            elif encoding == "bytes":
                assert bytes(np.asarray(value, np.uint8)) == expected
            elif encoding in ("str", "json"):
                assert value == expected, (i, name)
            elif encoding == "str_decimal":
                assert Decimal(value) == expected
            elif encoding.startswith("ndarray"):
                assert np.asarray(value).dtype == expected.dtype, (i, name)
                assert np.array_equal(value, expected), (i, name)
            else:  # scalars: the same value, in a column of MDS's dtype
                assert value == expected, (i, name)
                dtype = {"int": "int64", "str_int": "int64", "str_float": "float64"}.get(
                    encoding, encoding)
                assert np.asarray(value).dtype == np.dtype(dtype), (i, name)


@pytest.mark.slow  # 1.5-4 s each: MosaicML Streaming's reader (docs/testing.md)
@pytest.mark.parametrize("compression", [None, "zstd", "zstd:7", "gz", "bz2", "br", "snappy"])
def test_every_mds_encoding_converts_to_what_streaming_reads(compression, tmp_path):
    streaming = import_streaming()
    needs = {"br": "brotli", "snappy": "snappy"}.get((compression or "").split(":")[0])
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed")
    src = _write(streaming, tmp_path / "mds", _rows(), compression=compression)
    report = convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert report.written == N and not report.skipped
    assert report.actions == {"stored": N, "transcoded": 2 * N}
    ours = open_dataset(tmp_path / "out.chute")
    assert verify_dataset(tmp_path / "out.chute") == []
    assert len(json.loads((src / "index.json").read_text())["shards"]) > 2
    specs = ours.manifest["fields"]
    assert specs["jpeg"]["media"] == "image" and specs["png"]["kind"] == "bytes"
    assert specs["fixed"]["shape"] == [2, 3] and specs["tokens"]["ragged"]
    assert ours.manifest["source"]["kind"] == "mds"
    _assert_same(ours, _theirs(streaming, src))


def test_a_pickled_column_is_refused_in_one_line_and_converts_without_it(tmp_path):
    streaming = import_streaming()
    columns = {"label": "int", "obj": "pkl"}
    src = _write(streaming, tmp_path / "mds", [{"label": i, "obj": {"x": i}} for i in range(4)],
                 columns)
    with pytest.raises(FormatError, match=r"column 'obj' is pickled .*--drop obj") as info:
        convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out.chute").exists()
    convert_mds(src, tmp_path / "out.chute", OPTIONS, drop=["obj"])
    ours = open_dataset(tmp_path / "out.chute")
    assert list(ours.manifest["fields"]) == ["label"]
    assert [int(ours[i]["label"]) for i in range(4)] == [0, 1, 2, 3]


def test_a_list_of_images_is_refused_naming_the_column(tmp_path):
    streaming = import_streaming()
    from PIL import Image

    image = Image.fromarray(np.zeros((4, 4, 3), np.uint8))
    src = _write(streaming, tmp_path / "mds", [{"frames": [image, image], "label": 1}],
                 {"frames": "list[png]", "label": "int"})
    with pytest.raises(FormatError, match=r"column 'frames' is MDS 'list\[png\]'.*--drop frames"):
        convert_mds(src, tmp_path / "out.chute", OPTIONS)


def test_the_cli_converts_and_drops(tmp_path, capsys):
    streaming = import_streaming()
    rows = _rows(4)
    src = _write(streaming, tmp_path / "mds", rows, compression="zstd")
    dst = tmp_path / "cli.chute"
    assert main(["convert", "mds", str(src), str(dst), "--no-progress", "--json",
                 "--drop", "money", "--drop", "free"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["written"] == 4 and out["skipped"] == 0
    fields = open_dataset(dst).manifest["fields"]
    assert "money" not in fields and "free" not in fields and "jpeg" in fields
    with pytest.raises(SystemExit):
        main(["convert", "mds", "--help"])
    assert "ndarray:DTYPE:SHAPE -> ndarray field" in capsys.readouterr().out


# -- without mosaicml-streaming: the documented layout, written by hand --------------------------
LAYOUT = {"image": "jpeg", "label": "int", "score": "float32", "caption": "str",
          "emb": "ndarray:float32:2,2", "meta": "json"}


def _layout_rows(n: int) -> list[dict]:
    return [{"image": jpeg_bytes(i), "label": i, "score": i / 4, "caption": f"c{i}",
             "emb": np.full((2, 2), i, np.float32), "meta": {"k": [i]}} for i in range(n)]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_the_documented_layout_converts_without_mosaicml_streaming(compression, tmp_path):
    rows = _layout_rows(7)
    src = write_mds_layout(tmp_path / "mds", rows, LAYOUT, compression=compression)
    report = convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert report.written == 7 and report.actions == {"stored": 7}
    ours = open_dataset(tmp_path / "out.chute")
    for i, row in enumerate(rows):
        got = ours[i]
        assert bytes(np.asarray(got["image"], np.uint8)) == row["image"]  # byte for byte
        assert int(got["label"]) == i and float(got["score"]) == i / 4
        assert got["caption"] == row["caption"] and got["meta"] == row["meta"]
        assert np.array_equal(got["emb"], row["emb"])
        assert (int(got["height"]), int(got["width"])) == (12, 10)


def test_a_truncated_shard_is_an_error_naming_it(tmp_path):
    src = write_mds_layout(tmp_path / "mds", _layout_rows(6), LAYOUT)
    shard = src / "shard.00001.mds"
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(FormatError, match=r"shard\.00001\.mds"):
        convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert not (tmp_path / "out.chute").exists()


def test_a_folder_without_an_index_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="index.json"):
        convert_mds(tmp_path / "empty", tmp_path / "out.chute", OPTIONS)


def test_an_unreadable_image_is_skipped_and_listed(tmp_path):
    rows = _layout_rows(5)
    rows[2]["image"] = rows[2]["image"][:30]  # truncated JPEG
    src = write_mds_layout(tmp_path / "mds", rows, LAYOUT)
    report = convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert report.written == 4 and [key for key, _ in report.skipped] == ["shard.00000.mds:2"]
    with pytest.raises(Exception, match="--strict"):
        convert_mds(src, tmp_path / "strict.chute",
                    ConvertOptions(progress=False, strict=True))


def test_an_s3_prefix_converts_like_the_folder(tmp_path, s3):
    from chute.readers.storage._object_store import Remote

    _, bucket = s3
    src = write_mds_layout(tmp_path / "mds", _layout_rows(5), LAYOUT, compression="zstd")
    remote = Remote(f"{bucket}/mds")
    for path in sorted(src.iterdir()):
        remote.put_file(path.name, path)
    convert_mds(src, tmp_path / "local.chute", OPTIONS)
    convert_mds(f"{bucket}/mds", tmp_path / "s3.chute", OPTIONS)
    local, from_s3 = open_dataset(tmp_path / "local.chute"), open_dataset(tmp_path / "s3.chute")
    assert len(local) == len(from_s3) == 5
    for i in range(5):
        a, b = local[i], from_s3[i]
        assert bytes(np.asarray(a["image"], np.uint8)) == bytes(np.asarray(b["image"], np.uint8))
        assert a["meta"] == b["meta"] and int(a["label"]) == int(b["label"])


def test_a_merged_index_of_sub_datasets_converts_in_its_order(tmp_path):
    """streaming's merge_index: one index.json at the root naming the shards of each
    sub-folder (what parallel MDS writers leave)."""
    streaming = import_streaming()
    from streaming.base.util import merge_index

    rows = _rows(6)
    root = tmp_path / "mds"
    _write(streaming, root / "part0", rows[:3], compression="zstd")
    _write(streaming, root / "part1", rows[3:], compression="zstd")
    merge_index(str(root), keep_local=True)
    names = [s["raw_data"]["basename"] for s in
             json.loads((root / "index.json").read_text())["shards"]]
    assert all("/" in name for name in names)  # part0/shard.00000.mds, ...
    convert_mds(root, tmp_path / "out.chute", OPTIONS)
    ours = open_dataset(tmp_path / "out.chute")
    assert [int(ours[i]["label"]) for i in range(6)] == [r["label"] for r in rows]
    _assert_same(ours, _theirs(streaming, root))


def test_arrays_whose_inner_dimensions_vary_stop_the_convert_naming_the_column(tmp_path):
    streaming = import_streaming()
    arrays = [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)]
    src = _write(streaming, tmp_path / "mds", [{"x": a} for a in arrays], {"x": "ndarray"})
    with pytest.raises(FormatError, match=r"field 'x'.*the first dimension may vary") as info:
        convert_mds(src, tmp_path / "out.chute", OPTIONS)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out.chute").exists()


def test_a_pipeline_reads_the_converted_images(tmp_path):
    """The converted dataset is what the image Pipeline needs, whatever the column's name."""
    import chute

    rows = [{"img": jpeg_bytes(i), "label": i} for i in range(6)]
    src = write_mds_layout(tmp_path / "mds", rows, {"img": "jpeg", "label": "int"})
    convert_mds(src, tmp_path / "out.chute", OPTIONS)
    image = chute.ImageOptions(size=8, backend="cpu", backend_options={"threads": 1})
    pipe = chute.Pipeline(str(tmp_path / "out.chute"), 3, fields={"img": image, "label": None},
                          device="cpu", augment="eval")
    labels = []
    for batch in pipe:
        assert tuple(batch["img"].shape[-2:]) == (8, 8)
        labels += batch["label"].tolist()
    assert sorted(labels) == list(range(6))
