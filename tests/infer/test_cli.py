import json

import pytest

from chute.cli import main
from chute.infer import load_config
from tests.infer.conftest import EXAMPLES


def _write(path, stages) -> str:
    path.write_text(json.dumps({"stages": stages}))
    return str(path)


@pytest.mark.slow
def test_infer_bench_json_shape(tmp_path, video_dataset, capsys):
    config = _write(tmp_path / "c.json", [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader",
         "options": {"num_frames": 8, "size": 32}, "replicas": 1, "max_batch": 2},
        {"name": "model", "fn": f"{EXAMPLES / 'video_classifier.py'}:build",
         "options": {"seed": 0}, "max_batch": 4, "max_wait_ms": 10}])
    # the model file is outside the config's folder: allowed explicitly
    code = main(["infer-bench", config, str(video_dataset), "--rate", "40", "--requests", "8",
                 "--json", "--allow-outside"])
    captured = capsys.readouterr()
    assert code == 0
    result = json.loads(captured.out)
    assert result["throughput"] > 0 and result["dropped"] + result["completed"] == 8
    assert result["failed"] == 0
    assert set(result["latency_ms"]) == {"p50", "p95", "p99"}
    assert result["latency_ms"]["p50"] <= result["latency_ms"]["p95"] <= \
        result["latency_ms"]["p99"]
    assert set(result["stages"]) == {"decode", "model"}
    model = result["stages"]["model"]
    assert model["replicas"] == 1 and model["batch_size"] == 4 and 0 < model["busy"] <= 1
    assert "throughput" in captured.err and "infer-bench" in captured.err  # report + progress


@pytest.mark.slow
def test_infer_bench_search_prints_its_table_and_runs_the_pick(tmp_path, video_dataset,
                                                              capsys):
    config = _write(tmp_path / "c.json", [{"name": "double",
                                           "fn": "tests.infer._stages:double"}])
    saved = tmp_path / "picked.json"
    code = main(["infer-bench", config, str(video_dataset), "--requests", "12", "--search",
                 "--slo-ms", "500", "--budget-s", "0.1", "--save-config", str(saved), "--json",
                 "--no-progress", "--search-waits", "25"])
    captured = capsys.readouterr()
    assert code == 0
    result = json.loads(captured.out)
    search = result["search"]
    assert "| varied |" in search["table"] and "double 1x1" in search["table"]
    assert search["sustained_rate"] > 0
    picked = search["picked"]["double"]
    # the tiny budget measures only the starting configuration
    rows = [line for line in search["table"].splitlines() if line.startswith("| double")]
    assert len(rows) > 1 and all("skipped: budget" in row for row in rows[1:])
    assert "skipped" not in rows[0]
    assert picked == {"replicas": 1, "max_batch": 1, "max_wait_ms": 0.0}
    # --search-waits puts each wait next to the stage's own in the grid of batch sizes > 1
    for setting in ("double 1x2 w0ms", "double 1x2 w25ms", "double 2x4 w25ms"):
        assert f"| {setting} |" in search["table"]
    assert "double 1x1 w" not in search["table"]
    assert result["stages"]["double"]["replicas"] == picked["replicas"]
    assert result["stages"]["double"]["batch_size"] == picked["max_batch"]
    reloaded = load_config(saved).stage("double")
    assert (reloaded.replicas, reloaded.max_batch) == (picked["replicas"], picked["max_batch"])


def test_infer_bench_names_a_bad_config(tmp_path, video_dataset, capsys):
    config = _write(tmp_path / "c.json", [{"name": "x", "fn": "nocolon", "replicas": 1}])
    assert main(["infer-bench", config, str(video_dataset)]) == 1
    assert "fn as 'module:attr'" in capsys.readouterr().err


def test_infer_bench_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["infer-bench", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for option in ("CONFIG", "DATASET", "--rate", "--requests", "--json", "--search",
                   "--slo-ms", "--budget-s", "--search-waits", "--search-requests",
                   "--save-config", "--allow-outside", "--no-progress", "--decode"):
        assert option in text, option
    # the loader's backend decodes file requests too (they left PyAV when backend 'dali' came)
    decode = " ".join(text.split("--decode {auto,cpu,dali}")[-1].split())
    assert "dataset and file ones alike" in decode and "PyAV either way" not in decode


@pytest.mark.slow
@pytest.mark.parametrize(("fn", "status"), [("tests.infer._stages:always_fails", 4),
                                            ("tests.infer._stages:fail_on_three", 3),
                                            ("tests.infer._stages:slow", 0)])
def test_infer_bench_exit_status_says_whether_requests_failed(tmp_path, video_dataset, capsys,
                                                              fn, status):
    config = _write(tmp_path / "c.json", [{"name": "s", "fn": fn}])
    code = main(["infer-bench", config, str(video_dataset), "--requests", "4", "--json",
                 "--no-progress"])
    result = json.loads(capsys.readouterr().out)
    assert code == status == result["exit_status"]
    assert result["failed"] == {4: 4, 3: 1, 0: 0}[status]
    service = result["stages"]["s"]["service_ms"]
    assert result["stages"]["s"]["calls"] >= 1 and service["mean"] <= service["p95"]
    if fn.endswith(":slow"):  # a call sleeps 0.2 s
        assert 195 <= service["mean"] < 1000, service


@pytest.mark.slow
def test_infer_bench_search_keeps_to_its_budget(tmp_path, video_dataset, capsys):
    config = _write(tmp_path / "c.json", [{"name": "s", "fn": "tests.infer._stages:slow"}])
    code = main(["infer-bench", config, str(video_dataset), "--requests", "8", "--search",
                 "--slo-ms", "2000", "--budget-s", "12", "--json", "--no-progress"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["search"]["seconds"] <= 12.0, result["search"]["table"]
    assert "budget" in result["search"]["table"]  # some of the grid did not fit


@pytest.mark.slow
def test_infer_bench_decode_sets_the_loaders_backend(tmp_path, video_dataset, capsys):
    pytest.importorskip("nvidia.dali")
    config = _write(tmp_path / "c.json", [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader",
         "options": {"num_frames": 4, "size": 32, "backend": "cpu"}}])
    # the dataset is H.264, which DALI's CPU-only mode refuses: every request says so
    code = main(["infer-bench", config, str(video_dataset), "--requests", "2", "--json",
                 "--no-progress", "--decode", "dali"])
    result = json.loads(capsys.readouterr().out)
    assert code == 4 and result["failed"] == 2
    assert "h264" in result["errors"][0] and "--decode cpu" in result["errors"][0]


def test_infer_bench_decode_needs_a_video_loader_first_stage(tmp_path, video_dataset, capsys):
    config = _write(tmp_path / "c.json", [{"name": "s", "fn": "tests.infer._stages:double"}])
    assert main(["infer-bench", config, str(video_dataset), "--decode", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--decode cpu: the first stage 's'" in err[0]


@pytest.mark.parametrize("fn, loader", [
    ("chute.infer:VideoClipLoader", True),
    ("chute.infer._video_loader:VideoClipLoader", True),  # the same class, another spelling
    ("chute.infer:no_such_name", False),
    ("tests.infer._stages:double", False),
])
def test_decode_finds_the_video_loader_by_what_its_fn_names(fn, loader):
    from chute._cli.infer_bench import _first_loader
    from chute.infer import InferConfig, StageConfig

    config = InferConfig([StageConfig("decode", fn, options={"size": 32})])
    assert (_first_loader(config) is config.stages[0]) is loader


@pytest.mark.slow  # starts the inference server
def test_infer_bench_on_an_image_dataset_says_it_has_no_video_field(tmp_path, capsys):
    """Issue 38 item 14: it said "field 'video' ... holds video but the dataset lacks
    num_frames"; now that there is no video field, and which fields there are."""
    from tests.pipelines._pipeline_data import write_dataset

    images = write_dataset(tmp_path / "images.chute", n=4, meta=False)
    config = _write(tmp_path / "c.json", [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader",
         "options": {"num_frames": 4, "size": 16}, "replicas": 1, "max_batch": 1}])
    assert main(["infer-bench", config, str(images), "--requests", "2", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{images}: no field 'video' to load video clips from (its fields: image, " in err
    assert "lacks" not in err
