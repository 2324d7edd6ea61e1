"""The decision cache and the library's entry points over it: autotune() stores, and
stored_decision() finds, a decision per machine + dataset + parameters."""

import json

import pytest

from chute.autotune import (
    DatasetIdentity,
    TuneParams,
    autotune,
    cache_dir,
    dataset_identity,
    decision_key,
    decision_path,
    load_record,
    machine_fingerprint,
    store_record,
    stored_decision,
)
from tests.autotune._fakes import FakeClock, FakeRunner, cand


def _ds(fingerprint, path="/data/train.chute"):
    return DatasetIdentity(path, fingerprint)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CHUTE_CACHE_DIR")
    assert cache_dir() == tmp_path / "x" / "chute"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "chute"


def test_params_normalise():
    torch = pytest.importorskip("torch")
    a = TuneParams(64, 224, "train", torch.float16, "cuda")
    b = TuneParams(64, (224, 224), "train", "float16", "cuda:0")
    assert a == b
    with pytest.raises(ValueError, match="augment"):
        TuneParams(64, 224, "training")


def test_key_changes_with_dataset_parameters_and_machine():
    machine = machine_fingerprint()
    base = TuneParams(32, 224, "train", "float16", "cpu")
    key = decision_key(machine, "fp1", base)
    assert key == decision_key(dict(machine), "fp1", TuneParams(32, 224, "train"))
    variants = [
        decision_key(machine, "fp2", base),
        decision_key(machine, "fp1", TuneParams(64, 224, "train", "float16", "cpu")),
        decision_key(machine, "fp1", TuneParams(32, 160, "train", "float16", "cpu")),
        decision_key(machine, "fp1", TuneParams(32, 224, "eval", "float16", "cpu")),
        decision_key(machine, "fp1", TuneParams(32, 224, "train", "float32", "cpu")),
        decision_key(machine, "fp1", TuneParams(32, 224, "train", "float16", "cuda:1")),
        decision_key({**machine, "gpus": ["NVIDIA A100"]}, "fp1", base),
        decision_key({**machine, "cpu_count": machine["cpu_count"] + 1}, "fp1", base),
    ]
    assert len({key, *variants}) == len(variants) + 1


def test_store_is_atomic_and_loads_back(cache):
    path = store_record({"key": "k1", "choice": "cpu", "backend_options": {}, "reason": "r",
                         "candidates": []})
    assert path == decision_path("k1") and path.parent == cache / "autotune"
    assert [p.name for p in path.parent.iterdir()] == ["k1.json"]  # no temp file left
    assert load_record("k1")["choice"] == "cpu"
    assert load_record("other") is None


@pytest.mark.parametrize("text", ["{not json", '{"schema": 1, "key": "elsewhere", "choice": "cpu"}',
                                  '["a list"]', '{"schema": 99, "key": "k1", "choice": "cpu"}'])
def test_corrupt_or_foreign_record_is_a_miss_with_a_warning(cache, text):
    decision_path("k1").parent.mkdir(parents=True)
    decision_path("k1").write_text(text)
    with pytest.warns(UserWarning, match="not a valid chute decision record"):
        assert load_record("k1") is None


def _tune_fake(ds, params, rates, clock=None):
    clock = clock or FakeClock()
    runner = FakeRunner(clock, rates)
    cands = [cand(name, i) for i, name in enumerate(rates)]
    result = autotune(ds, params, budget=60.0, candidates=cands, runner=runner, clock=clock,
                      window=0.5)
    return result, cands


def test_autotune_stores_and_stored_decision_finds_it():
    ds = _ds("fp-1")
    params = TuneParams(16, 64, "train", "float16", "cpu")
    result, cands = _tune_fake(ds, params, {"slow": 100.0, "fast": 250.0})
    assert result["choice"] == "cpu" and result["backend_options"] == {"n": 1}
    record = load_record(result["key"])
    assert record["dataset"] == {"path": "/data/train.chute", "fingerprint": "fp-1"}
    assert record["params"] == params.as_dict() and record["machine"] == machine_fingerprint()
    assert [c["img_per_s"] for c in record["candidates"]] == [100.0, 250.0]
    assert "fast (250 img/s) won by 2.50x over slow (100 img/s)" in record["reason"]
    assert stored_decision(ds, params, cands) == record


@pytest.mark.parametrize("change", ["dataset", "batch_size", "image_size", "augment", "dtype",
                                    "device"])
def test_changed_dataset_or_parameter_has_no_decision(change):
    params = TuneParams(16, 64, "train", "float16", "cpu")
    _, cands = _tune_fake(_ds("fp-1"), params, {"slow": 100.0, "fast": 250.0})
    assert stored_decision(_ds("fp-1"), params, cands) is not None
    ds, kw = _ds("fp-1"), params.as_dict()
    if change == "dataset":
        ds = _ds("fp-2")  # same path, rewritten data
    else:
        kw[change] = {"batch_size": 32, "image_size": 96, "augment": "eval",
                      "dtype": "float32", "device": "cuda:0"}[change]
    assert stored_decision(ds, TuneParams(**kw), cands) is None


def test_no_cache_writes_nothing(cache):
    clock = FakeClock()
    autotune(_ds("fp-9"), TuneParams(16, 64, "train"), budget=10.0, use_cache=False,
             candidates=[cand("a", 0)], runner=FakeRunner(clock, {"a": 5.0}), clock=clock)
    assert not cache.exists()


def test_a_stored_choice_no_longer_on_offer_is_not_reused():
    params = TuneParams(16, 64, "train", "float16", "cpu")
    result, cands = _tune_fake(_ds("fp-1"), params, {"ghost": 100.0})
    assert json.loads(decision_path(result["key"]).read_text())["choice"] == "cpu"
    assert stored_decision(_ds("fp-1"), params, []) is None
    gone = [cand("ghost", 0, available=False, reason="uninstalled")]
    assert stored_decision(_ds("fp-1"), params, gone) is None
    assert stored_decision(_ds("fp-1"), params, cands) is not None


def test_dataset_identity_takes_opened_datasets_and_refuses_paths():
    class Opened:
        path, fingerprint = "/data/x.chute", "fp"

    assert dataset_identity(Opened()) == DatasetIdentity("/data/x.chute", "fp")
    with pytest.raises(TypeError, match="open a path with chute.open_dataset first"):
        dataset_identity("/data/x.chute")
