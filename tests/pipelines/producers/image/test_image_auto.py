"""ImageOptions(backend="auto"): the image family's auto hook
(chute/pipelines/producers/image/_auto.py) over the autotune library: stored decision, else cpu
unmeasured, else a quick tune; and the Pipeline calling it, whatever was imported first."""

import subprocess
import sys

import pytest

import chute.pipelines.producers._candidates as cmod
import chute.pipelines.producers.image._auto as auto
from chute import ImageOptions, Pipeline
from chute.autotune import DatasetIdentity, TuneParams, autotune
from chute.pipelines import tune_dataset
from tests.autotune._fakes import FakeClock, FakeRunner, cand
from tests.pipelines._pipeline_data import write_dataset

DS = DatasetIdentity("/data/train.chute", "fp-1")
REQUEST = dict(dataset=DS, batch_size=8, image_size=(64, 64), dtype="float16", augment="eval")
UNMEASURED = "cpu chosen without measuring: the GPU backends cannot run here"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gpu_machine(monkeypatch):
    """One CUDA device and an importable DALI, as far as the probes can tell."""
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: None)


def _store_fake_decision(monkeypatch, params):
    clock = FakeClock()
    cands = [cand("slow", 0), cand("fast", 1)]
    result = autotune(DS, params, candidates=cands, budget=60.0, clock=clock, window=0.5,
                      runner=FakeRunner(clock, {"slow": 100.0, "fast": 250.0}))
    monkeypatch.setattr(auto, "image_candidates", lambda device: cands)
    return result


def test_a_stored_decision_wins_even_on_a_gpu_machine(monkeypatch, gpu_machine):
    result = _store_fake_decision(monkeypatch, TuneParams(8, 64, "eval", "float16", "cuda:0"))
    monkeypatch.setattr(auto, "tune_dataset", lambda *a, **k: pytest.fail("must not measure"))
    name, options, reason = auto.resolve_auto_backend(DS, batch_size=8, image_size=64,
                                                      augment="eval", device="cuda")
    assert (name, options) == ("cpu", {"n": 1})
    assert result["key"] in reason and "won by 2.50x" in reason


def test_no_cache_does_not_read_the_stored_decision(monkeypatch):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    _store_fake_decision(monkeypatch, TuneParams(8, 64, "eval"))
    kw = dict(batch_size=8, image_size=64, augment="eval")
    assert auto.resolve_auto_backend(DS, **kw)[1] == {"n": 1}
    assert auto.resolve_auto_backend(DS, use_cache=False, **kw)[1] == {}


def test_no_decision_and_no_cuda_device_is_cpu_unmeasured(monkeypatch, cache):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    got = auto.resolve_auto_backend(DS, batch_size=8, image_size=64, augment="eval")
    assert got == ("cpu", {}, f"{UNMEASURED} (no CUDA device available)")
    assert not cache.exists()


def test_a_decision_for_another_shape_is_not_skipped_silently(monkeypatch, caplog):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    _store_fake_decision(monkeypatch, TuneParams(8, 64, "eval", "float16"))
    with caplog.at_level("WARNING", logger="chute"):
        name, _, reason = auto.resolve_auto_backend(DS, batch_size=8, image_size=64,
                                                    augment="eval", dtype="float32")
    assert name == "cpu" and "were skipped" in reason and "dtype" in reason
    assert "image_size" not in reason.split("other ")[1].split(" (")[0]
    assert "were skipped" in caplog.text


@pytest.mark.parametrize("device, dali_error, why", [
    ("cpu", None, "device='cpu' requested"),
    ("cuda:0", "nvidia-dali-cuda120 not installed (pip install chute[dali])", "not installed"),
])
def test_gpu_machine_measures_nothing_when_only_cpu_could_run(monkeypatch, device, dali_error,
                                                               why):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: dali_error)
    monkeypatch.setattr(auto, "tune_dataset", lambda *a, **k: pytest.fail("must not measure"))
    name, options, reason = auto.resolve_auto_backend(DS, batch_size=8, image_size=64,
                                                      augment="eval", device=device)
    assert (name, options) == ("cpu", {})
    assert reason.startswith(UNMEASURED) and why in reason


def test_gpu_machine_without_decision_runs_a_quick_tune(monkeypatch, gpu_machine):
    calls = []

    def fake_tune(ds, params, *, budget, use_cache, progress):
        calls.append((ds, params, budget, use_cache))
        return {"choice": "dali", "backend_options": {"hw_decoder_load": 0.65}, "key": "k9",
                "reason": "dali hw_decoder_load=0.65 won by 3.00x over cpu threads=2 dct=on"}

    monkeypatch.setattr(auto, "tune_dataset", fake_tune)
    name, options, reason = auto.resolve_auto_backend(DS, batch_size=8, image_size=64,
                                                      augment="eval", device="cuda", budget=7.0)
    assert (name, options) == ("dali", {"hw_decoder_load": 0.65})
    assert reason.startswith("quick autotune (7s budget, decision k9): dali")
    assert calls == [(DS, TuneParams(8, 64, "eval", "float16", "cuda:0"), 7.0, True)]


def test_cpu_without_measuring_where_gpus_cannot_run(monkeypatch):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    assert auto.cpu_without_measuring("cuda:0") == (
        "cpu", {}, f"{UNMEASURED} (no CUDA device available)")


def test_a_gpu_machine_is_not_decided_without_measuring(gpu_machine):
    assert auto.cpu_without_measuring("cuda:0") is None


_SAME_EITHER_WAY = """
import sys
first = sys.argv[2]
if first == "chute":
    import chute
    Pipeline = chute.Pipeline
else:
    from chute.pipelines import Pipeline
# count the calls of the image family's auto hook: reached from either import, with nothing
# registered first (an injection step would leave the plain import without it)
from chute.pipelines.producers.image import _auto
calls, decide = [], _auto.decide
_auto.decide = lambda **request: calls.append(1) or decide(**request)
with Pipeline(sys.argv[1], 8, fields={"image": __import__("chute.pipelines").pipelines
              .ImageOptions(size=32)}, device="cpu") as pipe:
    print(pipe.stats.backend, "|", pipe.stats.backend_reason, "| hook calls", len(calls))
"""


@pytest.mark.slow
def test_auto_is_decided_the_same_whether_or_not_chute_was_imported_first(tmp_path):
    """No registration step: chute.pipelines calls the autotuner itself (the layering of
    docs/design.md), so the import order cannot change the decision."""
    import chute
    import chute.pipelines

    assert chute.Pipeline is chute.pipelines.Pipeline
    path = write_dataset(tmp_path / "ds", n=16, sizes=(40, 72))
    env = {**__import__("os").environ, "CHUTE_CACHE_DIR": str(tmp_path / "cache")}
    got = [subprocess.run([sys.executable, "-c", _SAME_EITHER_WAY, str(path), first],
                          check=True, capture_output=True, text=True, env=env).stdout
           for first in ("chute", "pipelines")]
    assert got[0] == got[1] and got[0].startswith("cpu | cpu chosen without measuring")
    assert got[0].rstrip().endswith("| hook calls 1")  # pipelines called the autotuner itself


def test_user_backend_options_win_over_the_decided_ones(tmp_path, monkeypatch):
    path = write_dataset(tmp_path / "ds", n=16, sizes=(40, 72))
    asked = []

    def decide(**request):
        asked.append(request)
        return "cpu", {"threads": 2, "dct_scaling": True}, "because"

    monkeypatch.setattr(auto, "decide", decide)
    image = ImageOptions(size=32, backend_options={"threads": 1}, dtype="float32")
    with Pipeline(path, 8, fields={"image": image}, device="cpu", augment="eval") as pipe:
        assert pipe.stats.backend_options == {"threads": 1, "dct_scaling": True}
        assert pipe.stats.backend_reason == "because"
        assert pipe.stats.field_backends["image"]["backend"] == "cpu"
    assert asked == [{"dataset": pipe.dataset, "batch_size": 8, "image_size": (32, 32),
                      "augment": "eval", "dtype": "float32", "device": "cpu"}]


# -- through chute.Pipeline on a real dataset ---------------------------------------------

@pytest.fixture
def image_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return write_dataset(tmp_path / "ds", n=48, sizes=(40, 72))


def test_auto_without_decision_picks_cpu_and_says_why(image_dataset):
    with Pipeline(image_dataset, 8, fields={"image": ImageOptions(size=32)},
                  device="cpu") as pipe:
        assert pipe.stats.backend == "cpu"
        assert "without measuring" in pipe.stats.backend_reason


@pytest.mark.slow
def test_auto_uses_stored_decision_and_user_options_win(image_dataset):
    params = TuneParams(8, 32, "train", "float16", "cpu")
    result = tune_dataset(image_dataset, params, budget=3.0)
    auto = {"image": ImageOptions(size=32, backend="auto"), "label": None}
    with Pipeline(image_dataset, 8, fields=auto, device="cpu") as pipe:
        assert pipe.stats.backend == result["choice"]
        assert pipe.stats.backend_options == result["backend_options"]
        assert result["key"] in pipe.stats.backend_reason
        assert next(iter(pipe))["image"].shape == (8, 3, 32, 32)
    image = ImageOptions(size=32, backend="auto", backend_options={"threads": 1})
    with Pipeline(image_dataset, 8, fields={"image": image, "label": None}, device="cpu") as pipe:
        assert pipe.stats.backend_options["threads"] == 1
    # a different batch shape has no decision: back to the unmeasured default
    with Pipeline(image_dataset, 4, fields=auto, device="cpu") as pipe:
        assert "without measuring" in pipe.stats.backend_reason


def test_named_backend_is_reported(image_dataset):
    with Pipeline(image_dataset, 8, fields={"image": ImageOptions(size=32, backend="cpu"),
                                            "label": None}, device="cpu") as pipe:
        assert pipe.stats.backend == "cpu"
        assert "requested" in pipe.stats.backend_reason


def _cpu_cands():
    from chute._candidate import Candidate

    return [Candidate(name=f"cpu threads=2 dct={'on' if d else 'off'}", backend="cpu",
                      params={"threads": 2, "dct_scaling": d}, cost=(0, 2, 0 if d else 1))
            for d in (True, False)]


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_eval_never_switches_dct_scaling_on(monkeypatch, gpu_machine, augment):
    """DCT-domain scaling (faster, less exact) wins a tune in train; in eval it is not offered,
    and a decision stored with it on (before this rule) is not used."""
    cands = [*_cpu_cands(), cand("dali", 3, backend="dali")]
    monkeypatch.setattr(auto, "image_candidates", lambda device: cands)
    params = TuneParams(8, 64, augment, "float16", "cuda:0")
    clock = FakeClock()
    rates = {"cpu threads=2 dct=on": 400.0, "cpu threads=2 dct=off": 200.0, "dali": 100.0}
    autotune(DS, params, candidates=cands, budget=60.0, clock=clock, window=0.5,
             runner=FakeRunner(clock, rates))  # stores dct=on as the decision
    measured = []

    def fake_tune(ds, p, *, budget, use_cache, progress):
        measured.append(p)
        return {"choice": "cpu", "backend_options": {"threads": 2, "dct_scaling": False},
                "key": "k1", "reason": "retuned"}

    monkeypatch.setattr(auto, "tune_dataset", fake_tune)
    name, options, _ = auto.resolve_auto_backend(DS, batch_size=8, image_size=64,
                                                 augment=augment, device="cuda")
    assert options["dct_scaling"] is (augment == "train")
    assert len(measured) == (augment == "eval")  # the stored dct=on decision was not used
    offered = {c.name for c in auto.for_augment(cands, augment)}
    assert ("cpu threads=2 dct=on" in offered) is (augment == "train")


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_tune_dataset_offers_dct_scaling_only_in_train(monkeypatch, augment):
    monkeypatch.setattr(auto, "image_candidates", lambda device: _cpu_cands())
    monkeypatch.setattr(auto, "pipeline_runner", lambda *a, **k: None)
    seen = []
    monkeypatch.setattr(auto, "autotune",
                        lambda ds, params, *, candidates, **kw: seen.append(candidates))
    tune_dataset(DS, TuneParams(8, 64, augment))
    dct = [c.params["dct_scaling"] for c in seen[0]]
    assert dct == ([True, False] if augment == "train" else [False])


# ---- a GPU machine with nvImageCodec but no DALI (the lent GPU machines: docs/images.md) --------

@pytest.fixture
def nvimgcodec_only(monkeypatch):
    """One CUDA device, nvImageCodec and CuPy importable, DALI not installed."""
    import chute.pipelines.producers.image._dali_source as source
    import chute.pipelines.producers.image._nvimgcodec as nvimg

    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: cmod.DALI_INSTALL_HINT)
    monkeypatch.setattr(source, "cupy_import_error", lambda: None)
    monkeypatch.setattr(nvimg, "import_nvimgcodec", lambda: object())


def test_nvimgcodec_is_a_gpu_candidate_without_dali(nvimgcodec_only):
    # before: the nvimgcodec candidate took DALI's reason, so it was never measured there
    from chute.pipelines.producers._registry import image_candidates

    found = {c.backend: c for c in image_candidates("cuda:0")}
    assert found["nvimgcodec"].available, found["nvimgcodec"].reason
    assert not found["dali"].available and found["dali"].reason == cmod.DALI_INSTALL_HINT


def test_a_gpu_machine_without_dali_is_measured_not_given_the_cpu(nvimgcodec_only):
    # before: "cpu chosen without measuring ... (nvidia-dali-cuda120 not installed ...)"
    assert auto.cpu_without_measuring("cuda:0") is None


def test_cpu_without_measuring_names_each_gpu_backends_reason(monkeypatch):
    import chute.pipelines.producers.image._nvimgcodec as nvimg
    from chute.errors import BackendUnavailableError

    def missing():
        raise BackendUnavailableError("nvImageCodec is not installed")

    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: cmod.DALI_INSTALL_HINT)
    monkeypatch.setattr(nvimg, "import_nvimgcodec", missing)
    name, options, reason = auto.cpu_without_measuring("cuda:0")
    assert (name, options) == ("cpu", {})
    assert reason.startswith(UNMEASURED)
    assert f"dali: {cmod.DALI_INSTALL_HINT}" in reason
    assert "nvimgcodec: " in reason


def test_views_auto_stays_on_the_cpu_for_a_cpu_device(gpu_machine):
    name, reason = auto.views_backend("cpu")
    assert name == "cpu" and "device='cpu' requested" in reason


def test_views_auto_takes_the_first_gpu_backend_that_can_run(monkeypatch, gpu_machine):
    import chute.pipelines.producers.image._dali as dali
    import chute.pipelines.producers.image._dali_source as source
    import chute.pipelines.producers.image._nvimgcodec as nvimg

    monkeypatch.setattr(source, "cupy_import_error", lambda: None)
    monkeypatch.setattr(dali, "cupy_import_error", lambda: None)
    monkeypatch.setattr(nvimg, "import_nvimgcodec", lambda: object())
    name, reason = auto.views_backend("cuda:0")
    assert name == "dali" and "not measured" in reason


def test_views_auto_takes_nvimgcodec_without_dali(nvimgcodec_only):
    name, reason = auto.views_backend("cuda:0")
    assert name == "nvimgcodec" and "cuda:0" in reason


def test_views_auto_without_a_usable_gpu_backend_says_why(monkeypatch):
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 1)
    monkeypatch.setattr(cmod, "dali_import_error", lambda: cmod.DALI_INSTALL_HINT)
    name, reason = auto.views_backend("cuda:0")
    assert name == "cpu" and cmod.DALI_INSTALL_HINT in reason


def test_views_auto_on_the_cpu_device_records_its_reason(tmp_path):
    from chute import View

    path = write_dataset(tmp_path / "ds.chute", 6)
    views = [View(32, count=2)]
    with Pipeline(path, 2, fields={"image": ImageOptions(views=views)}, device="cpu") as pipe:
        next(iter(pipe))
        assert pipe.stats.backend == "cpu"
        assert pipe.stats.backend_reason.startswith("views= decoded by the cpu backend: ")
