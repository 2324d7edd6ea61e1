"""A dataset's fingerprint covers its field specs (an edited dtype or shape in chute.json is
another dataset), while resume states saved with the round-2 fingerprint still load."""

from __future__ import annotations

import json

import pytest

from chute import Pipeline
from chute.readers import open_dataset
from tests.pipelines._pipeline_data import write_dataset


def test_an_edited_field_spec_changes_the_fingerprint_and_old_states_still_load(tmp_path):
    path = write_dataset(tmp_path / "ds", n=12, latent_shape=(2, 4), images=False)
    ds = open_dataset(path)
    before, (round2, round3) = ds.fingerprint, ds.earlier_fingerprints
    assert before != round3  # round 3 left class names and sizes out (issue 37 item 5)
    assert before != round2
    with Pipeline(path, 4, fields=("label",), device="cpu") as pipe:
        next(iter(pipe))
        state = {**pipe.state_dict(), "fingerprint": round2}  # as saved before round 3
    with Pipeline(path, 4, fields=("label",), device="cpu") as pipe:
        pipe.load_state_dict(state)
        assert pipe.state_dict()["position"] == 4
    manifest = json.loads((path / "chute.json").read_text())
    manifest["fields"]["latent"]["dtype"] = "int16"  # same bytes, read as another dtype
    (path / "chute.json").write_text(json.dumps(manifest))
    try:
        edited = open_dataset(path)
    except ValueError:
        return  # refused at open: also never the old dataset
    assert edited.fingerprint != before
    with Pipeline(edited, 4, fields=("label",), device="cpu") as pipe, \
            pytest.raises(ValueError, match="saved for another dataset"):
        pipe.load_state_dict({**state, "fingerprint": before})
