"""An inference config is trusted code, with two guards (docs/inference.md, "A config is code"):
"file.py:attr" specs stay inside the config's folder unless allowed, and `replicas` is capped
by the machine (issue 26 item 10)."""

import json
import os

import pytest

from chute import _device
from chute.cli import main
from chute.errors import FormatError
from chute.infer import StageConfig, load_config

EVIL = "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('x')\n" \
       "def build(**kw):\n    return lambda xs: xs\n"


def _config(folder, fn, **stage) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "c.json"
    path.write_text(json.dumps({"stages": [{"name": "s", "fn": fn, **stage}]}))
    return str(path)


@pytest.fixture
def evil(tmp_path):
    (tmp_path / "evil.py").write_text(EVIL)
    return tmp_path / "evil.py"


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    monkeypatch.delenv("CHUTE_INFER_ALLOW_OUTSIDE", raising=False)
    monkeypatch.delenv("CHUTE_INFER_MAX_REPLICAS", raising=False)


@pytest.mark.parametrize("spec", ["../evil.py:build", "{abs}:build", "sub/../../evil.py:build"])
def test_a_file_spec_outside_the_config_folder_is_refused(tmp_path, evil, spec):
    config = _config(tmp_path / "cfg", spec.format(abs=evil))
    with pytest.raises(FormatError) as info:
        load_config(config)
    message = str(info.value)
    assert "\n" not in message and config in message and "stage 0 ('s')" in message
    assert "outside the config's folder" in message and "--allow-outside" in message
    assert "CHUTE_INFER_ALLOW_OUTSIDE=1" in message
    assert not (tmp_path / "ran").exists()


def test_a_symlink_leading_out_of_the_folder_is_refused(tmp_path, evil):
    (tmp_path / "cfg").mkdir()
    os.symlink(evil, tmp_path / "cfg" / "near.py")
    with pytest.raises(FormatError, match="outside the config's folder"):
        load_config(_config(tmp_path / "cfg", "near.py:build"))


def test_files_inside_the_folder_load(tmp_path):
    (tmp_path / "cfg" / "sub").mkdir(parents=True)
    (tmp_path / "cfg" / "sub" / "m.py").write_text("def f(xs):\n    return xs\n")
    config = load_config(_config(tmp_path / "cfg", "sub/../sub/m.py:f"))
    assert config.stage("s").fn == "sub/../sub/m.py:f"


def test_outside_files_load_when_allowed(tmp_path, evil, monkeypatch):
    config = _config(tmp_path / "cfg", "../evil.py:build")
    assert load_config(config, allow_outside=True).stage("s").fn == "../evil.py:build"
    monkeypatch.setenv("CHUTE_INFER_ALLOW_OUTSIDE", "1")
    assert load_config(config).stage("s").fn == "../evil.py:build"
    with pytest.raises(FormatError, match="outside"):
        load_config(config, allow_outside=False)  # the argument wins over the environment


def test_replicas_above_the_machine_cap_are_refused(tmp_path, monkeypatch):
    cap = 4 * _device.usable_cpu_count()
    assert load_config(_config(tmp_path, "m:f", replicas=cap)).stage("s").replicas == cap
    config = _config(tmp_path, "m:f", replicas=100000)
    with pytest.raises(FormatError) as info:
        load_config(config)
    message = str(info.value)
    assert "\n" not in message and config in message and f"replicas <= {cap}" in message
    assert "got 100000" in message and "CHUTE_INFER_MAX_REPLICAS=N" in message
    with pytest.raises(FormatError, match=f"replicas <= {cap}"):
        StageConfig("s", "m:f", replicas=cap + 1)
    # the cap holds for all stages together too
    stages = [{"name": f"s{k}", "fn": "m:f", "replicas": cap // 2 + 1} for k in range(2)]
    (tmp_path / "two.json").write_text(json.dumps({"stages": stages}))
    with pytest.raises(FormatError, match=f"{cap + 2} replicas in all, over this machine's "
                       f"cap of {cap}"):
        load_config(tmp_path / "two.json")
    monkeypatch.setenv("CHUTE_INFER_MAX_REPLICAS", str(cap + 1))
    assert StageConfig("s", "m:f", replicas=cap + 1).replicas == cap + 1
    monkeypatch.setenv("CHUTE_INFER_MAX_REPLICAS", "lots")
    with pytest.raises(FormatError, match="CHUTE_INFER_MAX_REPLICAS='lots': expected a positive"):
        StageConfig("s", "m:f")


@pytest.mark.parametrize("stage, message", [
    ({"replicas": True}, "replicas an integer >= 1 \\(got True\\)"),
    ({"replicas": 2.5}, "replicas an integer"),
    ({"max_batch": float("nan")}, "max_batch an integer"),
    ({"max_wait_ms": float("inf")}, "max_wait_ms a number >= 0"),
    ({"threads": float("inf")}, "threads an integer >= 1 or null"),
    ({"name": 1}, "a name \\(got 1\\)"),
    ({"fn": [[1]]}, "fn a 'module:attr' or 'file.py:attr' string or a callable"),
    ({"options": [1, 2]}, "options an object of keyword arguments or null"),
    ({"devices": [["cpu"], 3]}, "devices a device name or a non-empty list"),
])
def test_values_of_the_wrong_type_are_refused(tmp_path, stage, message):
    config = _config(tmp_path, **{"fn": "m:f", **stage})
    with pytest.raises(FormatError, match=message) as info:
        load_config(config)
    assert config in str(info.value)


@pytest.mark.parametrize("text, message", [
    (b'{"stages": [{"name": "s", "fn": "m:f", "replicas": ' + b"9" * 5000 + b"}]}",
     "not a usable JSON config"),
    (b"[" * 100000 + b"]" * 100000, "not a usable JSON config"),
    (b'{"stages": [{"name": "s\xff", "fn": "m:f"}]}', "not UTF-8 text"),
    (b'{"stages": [], "dataset": 3}', "dataset is a path"),
    (b'{"stages": []}', "c.json: an inference config needs at least one stage"),
    (b"\xef\xbb\xbf" + b'{"stages": [{"name": "s", "fn": "m:f"}]}', None),
])
def test_hostile_text_is_one_line_naming_the_config(tmp_path, text, message):
    (tmp_path / "c.json").write_bytes(text)
    if message is None:
        assert load_config(tmp_path / "c.json").stage("s").fn == "m:f"
        return
    with pytest.raises(FormatError, match=message) as info:
        load_config(tmp_path / "c.json")
    assert "\n" not in str(info.value) and str(tmp_path / "c.json") in str(info.value)


def test_infer_bench_refuses_an_outside_file_in_one_line(tmp_path, evil, capsys):
    config = _config(tmp_path / "cfg", "../evil.py:build")
    assert main(["infer-bench", config, str(tmp_path / "no-dataset")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "outside the config's folder" in err and "--allow-outside" in err
    # with the flag the config loads, and the next problem (no dataset) is the one reported
    assert main(["infer-bench", config, str(tmp_path / "no-dataset"), "--allow-outside"]) == 1
    err = capsys.readouterr().err
    assert "outside" not in err and "no-dataset" in err
    assert not (tmp_path / "ran").exists()


def test_a_saved_config_keeps_file_specs_loadable(tmp_path, capsys):
    from chute._cli.infer_bench import _save

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text("def f(xs):\n    return xs\n")
    config = load_config(_config(tmp_path / "a", "m.py:f"))
    _save(config, tmp_path / "up.json")  # the file stays inside the new config's folder
    assert load_config(tmp_path / "up.json").stage("s").fn == "a/m.py:f"
    assert capsys.readouterr().err == ""
    (tmp_path / "b").mkdir()
    _save(config, tmp_path / "b" / "x.json")  # absolute, so it needs the opt-in
    assert "--allow-outside" in capsys.readouterr().err
    with pytest.raises(FormatError, match="outside"):
        load_config(tmp_path / "b" / "x.json")
    saved = load_config(tmp_path / "b" / "x.json", allow_outside=True).stage("s").fn
    assert saved == f"{tmp_path.resolve() / 'a' / 'm.py'}:f"
