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
    # the checksums were checked (one mismatched): it said "checksums": false, which reads as
    # a dataset without checksums (a Megatron pair, a zarr group)
    assert result["checksums"] is True


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


def test_convert_video_audio_and_zarr_take_json(tmp_path, capsys):
    # only the image converts took --json; video, audio and zarr refused it as unknown
    pytest.importorskip("av")
    pytest.importorskip("soundfile")
    pytest.importorskip("zarr")
    from tests._audio import write_recordings
    from tests._video_media import make_video
    from tests.readers._zarr_stores import latents_values, write_store

    (tmp_path / "a.mp4").write_bytes(make_video(n=6, height=16, width=16))
    (tmp_path / "v.csv").write_text("path,text\na.mp4,clip\nmissing.mp4,gone\n")
    jsonl = write_recordings(tmp_path / "audio", names=("a.wav",))
    store = write_store(tmp_path / "x.zarr", latents_values(6, 2), chunk=3)
    capsys.readouterr()
    runs = {"video": ["convert", "video", str(tmp_path / "v.csv"), str(tmp_path / "v.chute")],
            "audio": ["convert", "audio", str(jsonl), str(tmp_path / "a.chute"),
                      "--root", str(tmp_path / "audio")],
            "zarr": ["convert", "zarr", str(store), str(tmp_path / "z.chute"),
                     "--sample-array", "base_frames"]}
    results = {}
    for kind, argv in runs.items():
        assert main([*argv, "--json"]) == 0, kind
        results[kind] = json.loads(capsys.readouterr().out)  # stdout: one JSON object only
    assert results["video"]["written"] == 1 and results["video"]["skipped"] == 1
    assert results["audio"]["written"] == 1 and results["audio"]["segments"] == 3
    assert results["zarr"]["written"] == 6 and "base_frames" in results["zarr"]["fields"]
