"""`chute convert zarr` (chute/convert/_convert_zarr.py): the converted dataset holds the
same values, tables stored once, and the same Pipeline call with a Lookup works on it unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from chute.convert import convert_zarr
from chute.pipelines import Lookup, Pipeline
from chute.readers import dataset_info, open_dataset, verify_dataset
from tests.readers._zarr_stores import latents_values, open_latents, write_store

pytest.importorskip("zarr")

S, V = 70, 9
VALUES = latents_values(S, V, seed=5)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_converted_dataset_same_values_and_pipeline(tmp_path, compression):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=2, chunk=16, codec="blosc")
    assert convert_zarr(store, tmp_path / "c.chute", shard_size="2KiB",
                        compression=compression, sample_array="base_frames") == S
    ds = open_dataset(tmp_path / "c.chute")
    assert ds.fields == {"base_frames": "ndarray", "segment_to_video": "scalar",
                         "clip_emb": "table"}
    assert len(ds.manifest["shards"]) > 1  # the table is not per shard
    np.testing.assert_array_equal(ds.read("base_frames", np.arange(S)), VALUES["base_frames"])
    np.testing.assert_array_equal(ds.column("segment_to_video"), VALUES["segment_to_video"])
    for path in (open_latents(store), tmp_path / "c.chute"):
        with Pipeline(path, 16, fields={"base_frames": None,
                                        "clip_emb": Lookup("segment_to_video")},
                      device="cpu", augment="eval") as pipe:
            for batch in pipe:
                ids = batch["index"].numpy()
                np.testing.assert_array_equal(batch["base_frames"].numpy(),
                                              VALUES["base_frames"][ids])
                np.testing.assert_array_equal(
                    batch["clip_emb"].numpy(), VALUES["clip_emb"][VALUES["segment_to_video"][ids]])
    info = dataset_info(tmp_path / "c.chute")
    assert "stored once" in info["field_types"]["clip_emb"]
    assert "[9, 8]" in info["field_types"]["clip_emb"]
    assert verify_dataset(tmp_path / "c.chute") == []


def test_verify_names_a_corrupt_table(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES)
    convert_zarr(store, tmp_path / "c.chute", sample_array="base_frames")
    table = tmp_path / "c.chute" / "clip_emb.table.npy"
    data = bytearray(table.read_bytes())
    data[-1] ^= 0xFF
    table.write_bytes(bytes(data))
    problems = verify_dataset(tmp_path / "c.chute")
    assert len(problems) == 1 and "clip_emb.table.npy" in problems[0]


def test_cli_convert_zarr(tmp_path, capsys):
    from chute.cli import main

    store = write_store(tmp_path / "x.zarr", VALUES, chunk=8)
    assert main(["convert", "zarr", str(store), str(tmp_path / "c.chute"),
                 "--compression", "zstd", "--sample-array", "base_frames"]) == 0
    assert f"wrote {S} samples" in capsys.readouterr().out
    assert open_dataset(tmp_path / "c.chute").specs["base_frames"]["compression"] == "zstd"


@pytest.mark.parametrize("attrs", ["[1, 2]", '"x"'])
def test_attributes_that_are_no_json_object_are_one_line(tmp_path, attrs, capsys):
    """Found by tests/robustness/test_zarr_stores.py (issue 26 item 16): an array's `.zattrs`
    holding a list made `chute convert zarr` raise a raw TypeError."""
    from chute.cli import main

    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=2)
    (store / "clip_emb" / ".zattrs").write_text(attrs)
    assert main(["convert", "zarr", str(store), str(tmp_path / "c.chute"),
                 "--sample-array", "base_frames"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "clip_emb" in err and "not a JSON object" in err
    assert not (tmp_path / "c.chute").exists()
