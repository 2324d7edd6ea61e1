import json
from pathlib import Path

import pytest

import chute.autotune._auto as auto_mod
from chute.autotune import (
    TuneParams,
    autotune,
    cache_dir,
    decision_key,
    decision_path,
    load_record,
    machine_fingerprint,
    resolve_auto_backend,
    store_record,
)
from tests.autotune._fakes import FakeClock, FakeRunner, cand


class FakeDataset:
    def __init__(self, fingerprint, path="/data/train.chute"):
        self.fingerprint = fingerprint
        self.path = Path(path)


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
    return result, runner


def test_autotune_stores_and_auto_uses_the_decision(monkeypatch):
    ds = FakeDataset("fp-1")
    params = TuneParams(16, 64, "train", "float16", "cpu")
    result, _ = _tune_fake(ds, params, {"slow": 100.0, "fast": 250.0})
    assert result["choice"] == "cpu" and result["backend_options"] == {"n": 1}
    record = load_record(result["key"])
    assert record["dataset"] == {"path": "/data/train.chute", "fingerprint": "fp-1"}
    assert record["params"] == params.as_dict() and record["machine"] == machine_fingerprint()
    assert [c["img_per_s"] for c in record["candidates"]] == [100.0, 250.0]
    assert "fast (250 img/s) won by 2.50x over slow (100 img/s)" in record["reason"]

    # the decision's options are only reused while that candidate is still on offer here
    monkeypatch.setattr(auto_mod, "_cached_choice_available", lambda record, device: True)
    name, options, reason = resolve_auto_backend(
        ds, batch_size=16, image_size=(64, 64), augment="train", dtype="float16", device="cpu")
    assert (name, options) == ("cpu", {"n": 1})
    assert result["key"] in reason and "won by 2.50x" in reason


@pytest.mark.parametrize("change", ["dataset", "batch_size", "image_size", "augment", "dtype"])
def test_changed_dataset_or_parameter_invalidates_the_decision(monkeypatch, change):
    monkeypatch.setattr(auto_mod, "_cached_choice_available", lambda record, device: True)
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    _tune_fake(FakeDataset("fp-1"), TuneParams(16, 64, "train", "float16", "cpu"),
               {"slow": 100.0, "fast": 250.0})
    kw = dict(batch_size=16, image_size=64, augment="train", dtype="float16", device="cpu")
    ds = FakeDataset("fp-1")
    assert resolve_auto_backend(ds, **kw)[1] == {"n": 1}  # the stored decision matches
    if change == "dataset":
        ds = FakeDataset("fp-2")  # same path, rewritten data
    else:
        kw[change] = {"batch_size": 32, "image_size": 96, "augment": "eval",
                      "dtype": "float32"}[change]
    name, options, reason = resolve_auto_backend(ds, **kw)
    assert (name, options) == ("cpu", {})
    assert reason == ("cpu chosen without measuring: the GPU backends cannot run here "
                      "(no CUDA device available)")


def test_no_cache_neither_reads_nor_writes(cache, monkeypatch):
    _tune_fake(FakeDataset("fp-1"), TuneParams(16, 64, "train"), {"a": 1.0})
    clock = FakeClock()
    autotune(FakeDataset("fp-9"), TuneParams(16, 64, "train"), budget=10.0, use_cache=False,
             candidates=[cand("a", 0)], runner=FakeRunner(clock, {"a": 5.0}), clock=clock)
    assert len(list((cache / "autotune").iterdir())) == 1
    monkeypatch.setattr(auto_mod, "_cached_choice_available", lambda record, device: True)
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    got = resolve_auto_backend(FakeDataset("fp-1"), batch_size=16, image_size=64,
                               augment="train", use_cache=False)
    assert got[1] == {}


def test_gpu_machine_without_decision_runs_a_quick_tune_and_stores_it(monkeypatch, cache):
    calls = []

    def fake_autotune(ds, params, *, budget, use_cache, progress):
        calls.append((params, budget, use_cache))
        return {"choice": "dali", "backend_options": {"hw_decoder_load": 0.65},
                "reason": "dali hw_decoder_load=0.65 won by 3.00x over cpu threads=2 dct=on"}

    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(auto_mod, "autotune", fake_autotune)
    name, options, reason = resolve_auto_backend(
        FakeDataset("fp-1"), batch_size=8, image_size=64, augment="eval", device="cuda",
        budget=7.0)
    assert (name, options) == ("dali", {"hw_decoder_load": 0.65})
    assert reason.startswith("quick autotune (7s budget")
    assert calls == [(TuneParams(8, 64, "eval", "float16", "cuda:0"), 7.0, True)]


def test_stale_choice_no_longer_available_is_not_reused(monkeypatch):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    params = TuneParams(16, 64, "train", "float16", "cpu")
    result, _ = _tune_fake(FakeDataset("fp-1"), params, {"ghost": 100.0})
    assert json.loads(decision_path(result["key"]).read_text())["choice"] == "cpu"
    # "ghost" (a fake candidate) is not among this machine's candidates
    got = resolve_auto_backend(FakeDataset("fp-1"), batch_size=16, image_size=64,
                               augment="train")
    assert got[1] == {}


@pytest.mark.parametrize("device, dali_error, why", [
    ("cpu", None, "device='cpu' requested"),
    ("cuda:0", "nvidia-dali-cuda120 not installed (pip install chute[dali])", "not installed"),
])
def test_gpu_machine_measures_nothing_when_only_cpu_could_run(monkeypatch, device, dali_error,
                                                               why):
    import chute.autotune._candidates as cmod

    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "_dali_import_error", lambda: dali_error)
    monkeypatch.setattr(auto_mod, "autotune", lambda *a, **k: pytest.fail("must not measure"))
    name, options, reason = resolve_auto_backend(
        FakeDataset("fp-1"), batch_size=8, image_size=64, augment="eval", device=device)
    assert (name, options) == ("cpu", {})
    assert reason.startswith("cpu chosen without measuring") and why in reason
