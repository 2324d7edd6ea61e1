"""`chute convert ffcv` (chute/convert/_ffcv.py): a .beton written by the real FFCV
with every built-in field type (tests/data/ffcv, made by make_fixtures.py there, since FFCV
needs a compiler and OpenCV to install) converted and compared field by field with what FFCV's
own Reader and Loader return; corrupt and truncated copies of it stop the convert in one line
naming the file and writing nothing; --drop, --strict, the CLI, a Pipeline and --engine ray."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from chute.cli import main
from chute.convert import ConvertOptions, convert_ffcv
from chute.errors import ChuteError, FormatError
from chute.readers import open_dataset, verify_dataset
from tests.convert._peers import decoded

DATA = Path(__file__).resolve().parents[1] / "data" / "ffcv"
OPTIONS = ConvertOptions(progress=False, shard_size="4KB")
N = 6
FIELDS = ("image", "thumb", "label", "score", "arr_f32", "arr_i16", "tensor", "blob", "meta")
# the .beton layout, written out here on its own to patch the fixture: header, descriptors
HEADER = np.dtype([("version", "<u2"), ("num_fields", "<u2"), ("page_size", "<u4"),
                   ("num_samples", "<u8"), ("alloc_table_ptr", "<u8")], align=True)
DESCRIPTOR_SIZE = 1041
IMAGE = np.dtype([("mode", "<u1"), ("width", "<u2"), ("height", "<u2"), ("ptr", "<u8")])
POINTER = np.dtype([("ptr", "<u8"), ("size", "<u8")])
RECORD = np.dtype(list(zip(FIELDS, [IMAGE, IMAGE, "<i8", "<f8", "<u8", "<u8", "<u8", POINTER,
                                    POINTER], strict=True)), align=True)
ALLOCATION = np.dtype([("sample_id", "<u8"), ("ptr", "<u8"), ("size", "<u8")])


@pytest.fixture(scope="module")
def expected():
    return dict(np.load(DATA / "expected.npz"))


def _beton(tmp_path: Path) -> Path:
    path = tmp_path / "all_fields.beton"
    path.write_bytes(gzip.decompress((DATA / "all_fields.beton.gz").read_bytes()))
    return path


def _ragged(expected: dict, name: str, i: int) -> bytes:
    offsets = expected[f"{name}.offsets"]
    return expected[f"{name}.payload"][offsets[i]:offsets[i + 1]].tobytes()


def test_every_field_converts_to_what_ffcv_reads(tmp_path, expected):
    report = convert_ffcv(_beton(tmp_path), tmp_path / "out.chute", OPTIONS)
    assert report.written == N and not report.skipped
    assert report.actions == {"stored": 2 * N - 1, "png": 1}  # sample 1's image is raw pixels
    dataset = open_dataset(tmp_path / "out.chute")
    assert verify_dataset(tmp_path / "out.chute") == []
    assert set(dataset.fields) == {*FIELDS, "height", "width"}
    metas = json.loads(expected["meta.json"].tobytes())
    for i in range(N):
        got = dataset[i]
        image = bytes(np.asarray(got["image"], np.uint8))
        if expected["image.mode"][i] == 0:  # JPEG: the bytes FFCV stored, unchanged
            assert image == _ragged(expected, "image", i), i
            # and the picture FFCV's own decoder shows (its libjpeg-turbo call and Pillow's
            # round a few levels apart)
            assert np.abs(decoded(image).astype(int) - expected["image.pixels"][i]).max() <= 4
        else:  # raw pixels, stored as PNG: exactly FFCV's pixels
            assert image.startswith(b"\x89PNG"), i
            assert np.array_equal(decoded(image), expected["image.pixels"][i]), i
            assert decoded(image).tobytes() == _ragged(expected, "image", i)
        assert (int(got["height"]), int(got["width"])) == (
            expected["image.height"][i], expected["image.width"][i])
        thumb = bytes(np.asarray(got["thumb"], np.uint8))
        assert thumb == _ragged(expected, "thumb", i), i
        assert decoded(thumb).shape == (expected["thumb.height"][i], expected["thumb.width"][i], 3)
        for name in ("label", "score", "arr_f32", "arr_i16", "tensor"):
            value = np.asarray(got[name])
            assert value.dtype == expected[name].dtype, (i, name)
            assert np.array_equal(value, expected[name][i]), (i, name)
        assert bytes(np.asarray(got["blob"], np.uint8)) == _ragged(expected, "blob", i)
        assert got["meta"] == metas[i]
    source = dataset.manifest["source"]
    assert source["kind"] == "ffcv" and source["fields"]["tensor"] == "TorchTensorField"


def test_the_cli_converts_drops_and_its_help_says_how_pixels_are_stored(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["convert", "ffcv", "--help"])
    assert "raw-pixel samples encoded as PNG (lossless" in capsys.readouterr().out
    assert main(["convert", "ffcv", str(_beton(tmp_path)), str(tmp_path / "out.chute"),
                 "--drop", "image", "--drop", "blob", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == N
    fields = set(open_dataset(tmp_path / "out.chute").fields)
    # the first image left (thumb) carries height/width
    assert fields == {*FIELDS, "height", "width"} - {"image", "blob"}
    with pytest.raises(FormatError, match="--drop nope: no such field"):
        convert_ffcv(_beton(tmp_path), tmp_path / "other.chute", OPTIONS, drop=["nope"])


def test_max_side_downscales_both_modes_to_jpeg(tmp_path):
    options = ConvertOptions(progress=False, max_side=16)
    report = convert_ffcv(_beton(tmp_path), tmp_path / "out.chute", options, drop=["thumb"])
    assert report.actions == {"resized": N}
    got = open_dataset(tmp_path / "out.chute")[1]
    assert bytes(np.asarray(got["image"], np.uint8))[:2] == b"\xff\xd8"
    assert (int(got["height"]), int(got["width"])) == (12, 16)


def _patch(path: Path, at: int, value) -> None:
    data = bytearray(path.read_bytes())
    raw = np.asarray(value).tobytes()
    data[at:at + len(raw)] = raw
    path.write_bytes(bytes(data))


def _layout(path: Path) -> tuple[np.void, int, np.ndarray]:
    """(header, metadata table offset, allocation table) of the fixture."""
    data = path.read_bytes()
    header = np.frombuffer(data[:HEADER.itemsize], HEADER)[0]
    return (header, HEADER.itemsize + len(FIELDS) * DESCRIPTOR_SIZE,
            np.frombuffer(data[int(header["alloc_table_ptr"]):], ALLOCATION))


def _record_at(path: Path, sample: int, field: str) -> int:
    _, metadata, _ = _layout(path)
    return metadata + sample * RECORD.itemsize + RECORD.fields[field][1]


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def _corrupt_cases():
    def short(p):
        _truncate(p, 10)

    def half(p):
        _truncate(p, p.stat().st_size // 2)

    def table_torn(p):
        _truncate(p, p.stat().st_size - 5)

    def version(p):
        _patch(p, 0, np.uint16(3))

    def no_fields(p):
        _patch(p, 2, np.uint16(0))

    def custom(p):
        _patch(p, HEADER.itemsize + 2 * DESCRIPTOR_SIZE, np.uint8(255))

    def dangling(p):
        at = _record_at(p, 2, "thumb") + IMAGE.fields["ptr"][1]
        ptr = np.frombuffer(p.read_bytes()[at:at + 8], "<u8")[0]
        _patch(p, at, np.uint64(ptr + 1))

    def raw_size(p):
        _patch(p, _record_at(p, 1, "image") + IMAGE.fields["height"][1], np.uint16(23))

    def bytes_size(p):
        _patch(p, _record_at(p, 4, "blob") + 8, np.uint64(1000))

    def mode(p):
        _patch(p, _record_at(p, 0, "image"), np.uint8(7))

    def outside(p):
        header, _, table = _layout(p)
        _patch(p, int(header["alloc_table_ptr"]) + 3 * ALLOCATION.itemsize + 16,
               np.uint64(1 << 40))

    def stolen(p):  # sample 3's blob points to sample 2's payload
        blob2 = np.frombuffer(p.read_bytes()[_record_at(p, 2, "blob"):][:16], POINTER)[0]
        _patch(p, _record_at(p, 3, "blob"), np.array([blob2], POINTER))

    return [
        (short, "shorter than the FFCV header"),
        (half, "allocation table offset"),
        (table_torn, "not a whole number of 24-byte entries"),
        (version, "FFCV format version 3"),
        (no_fields, "it declares no fields"),
        (custom, "type id 255"),
        (dangling, "field 'thumb' of sample 2 points to byte"),
        (raw_size, "field 'image' of sample 1 states 2208 bytes, but 2304 were allocated"),
        (bytes_size, "field 'blob' of sample 4 states 1000 bytes"),
        (mode, "image 'image' of sample 0 has mode 7"),
        (outside, "allocation 3 (bytes"),
        (stolen, "field 'blob' of sample 3 points to the payload of sample 2"),
    ]


@pytest.mark.parametrize(("damage", "message"), _corrupt_cases(),
                         ids=lambda case: getattr(case, "__name__", ""))
def test_a_corrupt_or_truncated_file_is_one_line_naming_it_and_writes_nothing(
        tmp_path, damage, message):
    path = _beton(tmp_path)
    damage(path)
    with pytest.raises(FormatError) as caught:
        convert_ffcv(path, tmp_path / "out.chute", OPTIONS)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(str(path)), text
    assert message in text, text
    assert not (tmp_path / "out.chute").exists()


def test_a_file_rewritten_after_its_check_fails_rather_than_giving_a_wrong_sample(tmp_path):
    from chute.convert import FFCVJob

    path = _beton(tmp_path)
    job = FFCVJob(path, OPTIONS)
    at = _record_at(path, 2, "blob")
    ptr = np.frombuffer(path.read_bytes()[at:at + 8], "<u8")[0]
    _patch(path, at, np.uint64(ptr + 1))
    with pytest.raises(FormatError, match=f"no payload is allocated at byte {ptr + 1}"):
        list(job.samples(job.units[0]))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        convert_ffcv(tmp_path / "none.beton", tmp_path / "out.chute", OPTIONS)


def _break_jpeg(path: Path, sample: int) -> None:
    """Overwrite the end-of-image marker of `thumb` in `sample`: a truncated JPEG."""
    at = _record_at(path, sample, "thumb") + IMAGE.fields["ptr"][1]
    ptr = int(np.frombuffer(path.read_bytes()[at:at + 8], "<u8")[0])
    _, _, table = _layout(path)
    size = int(table["size"][table["ptr"] == ptr][0])
    assert path.read_bytes()[ptr + size - 2:ptr + size] == b"\xff\xd9"
    _patch(path, ptr + size - 2, np.zeros(2, np.uint8))


def test_an_unreadable_jpeg_skips_its_sample_and_strict_stops(tmp_path, expected):
    path = _beton(tmp_path)
    _break_jpeg(path, 3)
    report = convert_ffcv(path, tmp_path / "out.chute", OPTIONS)
    assert report.written == N - 1
    assert [key for key, _ in report.skipped] == ["all_fields.beton:3"]
    assert "thumb" in report.skipped[0][1] and "truncated" in report.skipped[0][1]
    labels = [int(s["label"]) for s in open_dataset(tmp_path / "out.chute")]
    assert labels == [v for i, v in enumerate(expected["label"].tolist()) if i != 3]
    strict = ConvertOptions(progress=False, strict=True)
    with pytest.raises(ChuteError, match="sample all_fields.beton:3: image 'thumb'"):
        convert_ffcv(path, tmp_path / "strict.chute", strict)


@pytest.mark.slow  # about 2 s: the first Pipeline of a run builds its decoders
def test_a_pipeline_reads_the_converted_images(tmp_path, expected):
    """JPEG and PNG samples of one field decode through the image Pipeline."""
    import chute

    convert_ffcv(_beton(tmp_path), tmp_path / "out.chute", OPTIONS)
    image = chute.ImageOptions(size=8, backend="cpu", backend_options={"threads": 1})
    pipe = chute.Pipeline(str(tmp_path / "out.chute"), 3, fields={"image": image,
                                                                  "label": None},
                          device="cpu", augment="eval")
    labels = []
    for batch in pipe:
        assert tuple(batch["image"].shape[-2:]) == (8, 8)
        labels += batch["label"].tolist()
    assert sorted(labels) == sorted(expected["label"].tolist())


@pytest.mark.slow  # Ray starts worker processes
def test_on_ray_equals_the_single_process_convert(tmp_path, monkeypatch, ray_local):
    from chute.convert import _ffcv
    from chute.ray import RayEngine

    monkeypatch.setattr(_ffcv, "_SAMPLES_PER_UNIT", 2)  # 3 units, so Ray writes 3 parts
    path = _beton(tmp_path)
    convert_ffcv(path, tmp_path / "one.chute", OPTIONS)
    report = convert_ffcv(path, tmp_path / "ray.chute", OPTIONS, engine=RayEngine(task_size=1))
    assert report.written == N
    one, on_ray = open_dataset(tmp_path / "one.chute"), open_dataset(tmp_path / "ray.chute")
    for a, b in zip(one, on_ray, strict=True):
        assert bytes(np.asarray(a["image"], np.uint8)) == bytes(np.asarray(b["image"], np.uint8))
        assert a["meta"] == b["meta"] and np.array_equal(a["arr_f32"], b["arr_f32"])
