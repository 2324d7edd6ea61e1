import pytest

from chute.errors import FormatError
from chute.infer import InferConfig, StageConfig, load_config
from chute.infer._build import build_stage, resolve


def test_json_and_yaml_configs_load_the_same(tmp_path):
    (tmp_path / "c.json").write_text(
        '{"stages": [{"name": "a", "fn": "m.py:f", "replicas": 2, "devices": "cpu",'
        ' "max_batch": 4, "max_wait_ms": 5}], "dataset": "d"}')
    pytest.importorskip("yaml")
    (tmp_path / "c.yaml").write_text(
        "dataset: d\nstages:\n  - {name: a, fn: 'm.py:f', replicas: 2, devices: cpu,"
        " max_batch: 4, max_wait_ms: 5}\n")
    a, b = load_config(tmp_path / "c.json"), load_config(tmp_path / "c.yaml")
    assert a == b
    stage = a.stage("a")
    assert (stage.replicas, stage.devices, stage.max_batch, stage.max_wait_ms) == \
        (2, ["cpu"], 4, 5)
    assert a.base == str(tmp_path.resolve()) and a.dataset == "d"


@pytest.mark.parametrize("text, message", [
    ('{"stages": [{"name": "a", "fn": "m:f", "replica": 2}]}', "unknown keys \\['replica'\\]"),
    ('{"stages": [{"name": "a", "fn": "m:f", "replicas": 0}]}', "replicas an integer >= 1"),
    ('{"stages": [{"name": "a", "fn": "m:f"}, {"name": "a", "fn": "m:g"}]}', "unique"),
    ('{"stages": []}', "at least one stage"),
    ('{"stage": []}', "`stages` list"),
    ('{"stages": [', "not valid JSON"),
])
def test_bad_configs_say_what_is_wrong(tmp_path, text, message):
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(FormatError, match=message):
        load_config(tmp_path / "c.json")


def test_replicas_cycle_through_devices():
    stage = StageConfig("m", "a:b", replicas=3, devices=["cuda:0", "cuda:1"])
    assert [stage.device(k) for k in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]


def test_file_specs_resolve_relative_to_the_config(tmp_path):
    (tmp_path / "stage.py").write_text(
        "def make(scale, device='cpu', dataset=None):\n"
        "    return lambda xs: [x * scale for x in xs] + [device, dataset]\n")
    fn = build_stage("stage.py:make", {"scale": 2}, base=str(tmp_path), device="cpu",
                     dataset="ds")
    assert fn([1, 2]) == [2, 4, "cpu", "ds"]
    with pytest.raises(FormatError, match="no attribute 'nope'"):
        resolve("stage.py:nope", str(tmp_path))
    with pytest.raises(FormatError, match="no file"):
        resolve("missing.py:f", str(tmp_path))


def test_replace_changes_one_stage():
    config = InferConfig([StageConfig("a", "m:f"), StageConfig("b", "m:g")])
    changed = config.replace("b", replicas=2, max_batch=8)
    assert (changed.stage("b").replicas, changed.stage("b").max_batch) == (2, 8)
    assert changed.stage("a") == config.stage("a") and config.stage("b").replicas == 1


def test_the_example_config_names_callables_that_exist():
    from tests.infer.conftest import EXAMPLES

    config = load_config(EXAMPLES / "infer_video.json")
    assert [s.name for s in config.stages] == ["decode", "model"]
    for stage in config.stages:
        assert callable(resolve(stage.fn, config.base))
