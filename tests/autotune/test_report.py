import json

from chute.autotune import (
    CANDIDATE_KEYS,
    JSON_KEYS,
    Measurement,
    Trial,
    decision_json,
    format_table,
    select,
)
from chute.autotune import _report as report_mod
from tests.autotune._fakes import cand


def _decision():
    def m(rate):
        return Measurement(img_per_s=rate, cpu_percent=195.26, gpu_percent=None, images=64,
                           batches=4, seconds=0.5, warmup_seconds=1.0)

    return select([
        Trial(cand("cpu threads=1", 1), m(100.04)),
        Trial(cand("cpu threads=2", 2), m(180.0)),
        Trial(cand("cpu broken", 3), None, "failed: OSError: nope"),
        Trial(cand("dali", 4, backend="dali", available=False,
                   reason="no CUDA device available")),
    ])


def test_json_schema_is_stable_and_documented():
    out = decision_json(_decision(), "abc123")
    assert tuple(out) == JSON_KEYS == ("choice", "backend_options", "reason", "key", "unit",
                                       "candidates")
    assert all(tuple(c) == CANDIDATE_KEYS for c in out["candidates"])
    assert CANDIDATE_KEYS == ("name", "backend", "params", "available", "status", "reason",
                              "img_per_s", "cpu_percent", "gpu_percent", "fidelity")
    for key in JSON_KEYS + CANDIDATE_KEYS:
        assert f'"{key}"' in report_mod.__doc__
    assert out["choice"] == "cpu" and out["backend_options"] == {"n": 2} and out["key"] == "abc123"
    assert out["candidates"][0] == {
        "name": "cpu threads=1", "backend": "cpu", "params": {"n": 1}, "available": True,
        "status": "measured", "reason": None, "img_per_s": 100.0, "cpu_percent": 195.3,
        "gpu_percent": None, "fidelity": None}
    assert out["candidates"][2]["status"] == "failed"
    assert out["candidates"][2]["reason"] == "failed: OSError: nope"
    assert out["candidates"][3]["available"] is False
    assert out["candidates"][3]["reason"] == "no CUDA device available"
    assert json.loads(json.dumps(out)) == out


def test_table_lists_every_candidate_and_the_decision():
    text = format_table(decision_json(_decision(), "abc123"))
    lines = text.splitlines()
    assert lines[0].split() == ["candidate", "img/s", "CPU", "%", "GPU", "%", "fidelity",
                                "note"]
    row = next(line for line in lines if line.startswith("cpu threads=2"))
    assert row.split()[2:] == ["180", "195", "-", "-", "<-", "chosen"]
    assert any(line.startswith("dali") and line.endswith("no CUDA device available")
               for line in lines)
    assert "decision: cpu n=2" in text
    assert "cpu threads=2 (180 img/s) won by 1.80x over cpu threads=1 (100 img/s)" in text


def test_each_candidates_fidelity_is_reported_next_to_its_speed():
    from chute._candidate import Candidate

    exact = Candidate("cpu dct=off", "cpu", {"dct_scaling": False}, cost=(1,),
                      fidelity="exact")
    dct = Candidate("cpu dct=on", "cpu", {"dct_scaling": True}, cost=(0,),
                    fidelity="approx.: DCT-domain downscaling")

    def m(rate):
        return Measurement(img_per_s=rate, cpu_percent=195.26, gpu_percent=None, images=64,
                           batches=4, seconds=0.5, warmup_seconds=1.0)

    out = decision_json(select([Trial(dct, m(200.0)), Trial(exact, m(100.0))]), "k")
    assert [c["fidelity"] for c in out["candidates"]] == ["approx.: DCT-domain downscaling",
                                                          "exact"]
    row = next(line for line in format_table(out).splitlines() if line.startswith("cpu dct=off"))
    assert row.split()[2:] == ["100", "195", "-", "exact"]
