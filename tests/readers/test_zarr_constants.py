"""A zarr group with a 0-d array (a stored mean or scale) next to the per-sample arrays opens:
the 0-d array is no field but a constant (`ds.constants`), listed by `repr`, `dataset_info`
and `chute info`, and kept by `chute convert zarr` in the manifest (docs/latents.md,
"Constants"). zarr v2 and v3 stores, generated here."""

import json

import numpy as np
import pytest

from chute import ArrayOptions, Pipeline
from chute.cli import main
from chute.errors import FormatError
from chute.readers import dataset_info, open_dataset
from tests.readers._zarr_stores import write_store

pytest.importorskip("zarr")

S = 10
SCALE = np.float32(0.18215)  # not exact in float32: the stored bits must come back
MEAN = np.float64(-1.25e-3)


def _values() -> dict:
    rng = np.random.default_rng(0)
    return {"latent": rng.standard_normal((S, 4, 2)).astype(np.float16),
            "label": np.arange(S, dtype=np.int32) % 3,
            "scale": SCALE, "stats/mean": MEAN}


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def store(request, tmp_path):
    return write_store(tmp_path / "x.zarr", _values(), zarr_format=request.param, chunk=4)


def test_opens_with_the_0d_arrays_as_constants(store):
    ds = open_dataset(store)
    assert ds.fields == {"label": "scalar", "latent": "ndarray"} and len(ds) == S
    assert ds.constants == {"scale": SCALE, "stats/mean": MEAN}
    assert type(ds.constants["scale"]) is np.float32 and type(ds.constants["stats/mean"]) is \
        np.float64
    assert "scale:constant float32 0.18215" in repr(ds) and "stats/mean:constant float64" in \
        repr(ds)
    assert set(ds[3]) == {"label", "latent"}
    with pytest.raises(KeyError, match=r"0-d, a constant .*ds.constants\['scale'\]"):
        ds.reader("scale")


def test_a_pipeline_reads_the_per_sample_arrays(store):
    values = _values()
    seen = np.zeros(S, bool)
    with Pipeline(store, 4, fields={"latent": ArrayOptions(), "label": None}, device="cpu",
                  augment="eval", drop_last=False) as pipe:
        for batch in pipe:
            index = batch["index"].numpy()
            np.testing.assert_array_equal(batch["latent"].numpy(), values["latent"][index])
            np.testing.assert_array_equal(batch["label"].numpy(), values["label"][index])
            seen[index] = True
    assert seen.all()
    with pytest.raises(ValueError, match=r"'scale' is 0-d, a constant .*ds.constants\['scale'\]"):
        Pipeline(store, 4, fields={"latent": None, "scale": None}, device="cpu")


def test_info_lists_the_constants(store, capsys):
    constants = {"scale": {"dtype": "float32", "value": float(SCALE)},
                 "stats/mean": {"dtype": "float64", "value": float(MEAN)}}
    assert dataset_info(store)["constants"] == constants
    assert main(["info", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["constants"] == constants
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"constant    scale: float32 {float(SCALE)}" in out
    assert f"constant    stats/mean: float64 {float(MEAN)}" in out


def test_convert_keeps_the_constants_in_the_manifest(store, tmp_path, capsys):
    dst = tmp_path / "x.chute"
    assert main(["convert", "zarr", str(store), str(dst), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    converted = open_dataset(dst)
    kept = converted.manifest["zarr"]["constants"]
    assert report["constants"] == kept
    assert set(converted.fields) == {"label", "latent"} and len(converted) == S
    # the stored bits come back exactly from the dtype and the JSON value
    assert np.dtype(kept["scale"]["dtype"]).type(kept["scale"]["value"]) == SCALE
    assert np.dtype(kept["stats/mean"]["dtype"]).type(kept["stats/mean"]["value"]) == MEAN
    # and as the zarr group gives them: ds.constants on either
    assert converted.constants == open_dataset(store).constants == {"scale": SCALE,
                                                                   "stats/mean": MEAN}
    assert converted.constants["scale"].dtype == np.float32
    assert main(["convert", "zarr", str(store), str(tmp_path / "y.chute")]) == 0
    assert "0-d array scale -> manifest constant (float32 0.18215" in capsys.readouterr().out


def test_a_missing_chunk_of_a_constant_is_named_unless_fill(store):
    chunk = "c" if (store / "scale" / "c").exists() else "0"
    (store / "scale" / chunk).unlink()
    with pytest.raises(FormatError, match=r"0-d array 'scale' is missing.*missing_chunks='fill'"):
        open_dataset(store)
    ds = open_dataset(store, missing_chunks={"scale": "fill"})
    assert ds.constants["scale"] == 0 and ds.constants["stats/mean"] == MEAN


def test_a_group_of_only_0d_arrays_is_refused_in_one_line(tmp_path):
    path = write_store(tmp_path / "c.zarr", {"scale": SCALE})
    with pytest.raises(FormatError, match=r"holds only 0-d arrays \(\['scale'\]\)"):
        open_dataset(path)


def test_constants_of_every_dtype_come_back_from_the_manifest_json():
    from chute.readers.zarr._zarr import constants_from_json, constants_json

    values = {"f16": np.float16(0.1), "i64": np.int64(-(2**62)), "u8": np.uint8(255),
              "b": np.bool_(True), "c64": np.complex64(1.5 - 2.25j)}
    back = constants_from_json(json.loads(json.dumps(constants_json(values))))
    assert back == values and {k: v.dtype for k, v in back.items()} == \
        {k: v.dtype for k, v in values.items()}
