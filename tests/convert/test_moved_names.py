"""Writing moved from chute.readers to chute.convert (docs/design.md, "Layers"): every moved
name still loads from chute.readers, as the same object, with a DeprecationWarning that names
the new spelling and points at the caller's line; chute's own code, tests, benchmarks and docs
use the new one."""

import ast
import re
import warnings
from pathlib import Path

import pytest

import chute.convert
import chute.readers

ROOT = Path(__file__).resolve().parents[2]
MOVED = sorted(chute.readers._MOVED)  # the deprecation table under test


def test_the_moved_names_are_the_writing_names_of_chute_convert():
    assert {"ShardWriter", "PartWriter", "write_dataset", "convert_imagefolder",
            "update_metadata", "probe_video"} <= set(MOVED)
    assert set(MOVED) <= set(chute.convert.__all__)
    assert not set(MOVED) & set(chute.readers.__all__)
    assert not set(MOVED) & set(dir(chute.readers))


@pytest.mark.parametrize("name", MOVED)
def test_a_moved_name_still_loads_from_readers_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=rf"chute\.readers\.{name} is the round-3 "
                      rf"spelling.*import {name} from chute\.convert"):
        old = getattr(chute.readers, name)
    assert old is getattr(chute.convert, name)


def test_the_warning_points_at_the_importing_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from chute.readers import ShardWriter  # noqa: F401
    # `from ... import` may look the name up twice (importlib's hasattr, then the import)
    assert caught and {Path(w.filename).name for w in caught} == {Path(__file__).name}


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'convert_nothing'"):
        chute.readers.convert_nothing  # noqa: B018


def _old_spellings(path: Path) -> list[str]:
    text = path.read_text()
    found = [f"{path}: chute.readers.{m}" for m in
             re.findall(r"\bchute\.readers\.(\w+)", text) if m in MOVED]
    if "from chute.readers import" not in text:  # parsing every file took 2 s
        return found
    blocks = [text] if path.suffix == ".py" else re.findall(r"```python\n(.*?)```", text, re.S)
    for block in blocks:
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue
        found += [f"{path}:{node.lineno}: from chute.readers import {a.name}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module == "chute.readers"
                  for a in node.names if a.name in MOVED]
    return found


def test_nothing_of_chute_uses_the_old_spelling():
    here = Path(__file__).resolve()
    paths = [p for folder in ("chute", "tests", "benchmarks", "docs", "examples")
             for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md") and p != here]
    bad = [hit for p in paths + [ROOT / "README.md"] for hit in _old_spellings(p)]
    assert not bad, "old spellings of moved names:\n" + "\n".join(bad)


def test_the_scan_sees_both_spellings(tmp_path):
    sample = tmp_path / "x.md"
    sample.write_text("chute.readers.write_dataset(...)\n```python\n"
                      "from chute.readers import open_dataset, ShardWriter\n```\n")
    assert len(_old_spellings(sample)) == 2
