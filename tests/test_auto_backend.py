"""backend="auto" goes through the autotuner: a stored decision wins, else cpu unmeasured."""

import pytest

from chute import Pipeline
from chute._auto_backend import tune_dataset
from chute.autotune import TuneParams
from tests.pipelines._pipeline_data import write_dataset


@pytest.fixture
def dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    return write_dataset(tmp_path / "ds", n=48, sizes=(40, 72))


def test_auto_without_decision_picks_cpu_and_says_why(dataset):
    with Pipeline(dataset, 8, image_size=32, backend="auto", device="cpu") as pipe:
        assert pipe.stats.backend == "cpu"
        assert "without measuring" in pipe.stats.backend_reason


def test_auto_uses_stored_decision_and_user_options_win(dataset):
    params = TuneParams(8, 32, "train", "float16", "cpu")
    result = tune_dataset(dataset, params, budget=3.0)
    with Pipeline(dataset, 8, image_size=32, backend="auto", device="cpu") as pipe:
        assert pipe.stats.backend == result["choice"]
        assert pipe.stats.backend_options == result["backend_options"]
        assert result["key"] in pipe.stats.backend_reason
        assert next(iter(pipe))["image"].shape == (8, 3, 32, 32)
    with Pipeline(dataset, 8, image_size=32, backend="auto", device="cpu",
                  backend_options={"threads": 1}) as pipe:
        assert pipe.stats.backend_options["threads"] == 1
    # a different batch shape has no decision: back to the unmeasured default
    with Pipeline(dataset, 4, image_size=32, backend="auto", device="cpu") as pipe:
        assert "without measuring" in pipe.stats.backend_reason


def test_named_backend_is_reported(dataset):
    with Pipeline(dataset, 8, image_size=32, backend="cpu", device="cpu") as pipe:
        assert pipe.stats.backend == "cpu"
        assert "requested" in pipe.stats.backend_reason
