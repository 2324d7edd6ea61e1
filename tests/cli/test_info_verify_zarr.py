"""`chute info` and `chute verify` on zarr groups read directly
(chute/readers/zarr/_inspect_zarr.py)."""

from __future__ import annotations

import json

import pytest

from chute.cli import main
from tests.readers._zarr_stores import latents_values, write_store

pytest.importorskip("zarr")

VALUES = latents_values(40, 6, seed=5)


@pytest.fixture
def store(tmp_path):
    return write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec="zstd")


def test_info_names_every_array_with_its_bytes(store, capsys):
    assert main(["info", str(store), "--json", "--sample-array", "base_frames"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "zarr" and info["samples"] == 40
    assert info["fields"] == {"base_frames": "ndarray", "clip_emb": "table",
                              "segment_to_video": "scalar"}
    frames = info["arrays"]["base_frames"]
    assert frames["decoded_bytes"] == VALUES["base_frames"].nbytes
    assert frames["stored_bytes"] == sum(p.stat().st_size for p in
                                         (store / "base_frames").rglob("*") if p.is_file())
    assert info["bytes"]["payload"] == sum(a["stored_bytes"] for a in info["arrays"].values())
    assert main(["info", str(store), "--sample-array", "base_frames"]) == 0
    assert "array       clip_emb" in capsys.readouterr().out


def test_verify_decodes_every_chunk_and_names_the_bad_rows(store, capsys):
    assert main(["verify", str(store), "--no-progress"]) == 0
    assert "every chunk of every array decodes" in capsys.readouterr().out
    (store / "base_frames" / "c" / "7" / "0" / "0" / "0").write_bytes(b"broken")
    assert main(["verify", str(store), "--no-progress", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and not report["checksums"]
    assert len(report["problems"]) == 1
    assert "base_frames" in report["problems"][0] and "(7)" in report["problems"][0]


def test_info_does_not_size_files_outside_the_store(store, tmp_path, capsys):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"s" * 123_457)
    target = store / "base_frames" / "c" / "7" / "0" / "0" / "0"
    target.unlink()
    target.symlink_to(secret)
    assert main(["info", str(store), "--json", "--sample-array", "base_frames"]) == 1
    err = capsys.readouterr().err
    assert str(target) in err and "leads outside the zarr store" in err
