"""The API reference (docs/api, Sphinx autodoc) builds from the docstrings with warnings as
errors and documents every public name of every package's `__all__`."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

pytest.importorskip("sphinx")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "readers", "convert", "autotune", "fallbacks", "kernels", "errors",
            "infer", "ray")


def test_api_reference_builds_and_covers_every_public_name(tmp_path):
    run = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q",
                          "-b", "html", str(ROOT / "docs" / "api"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    missing = []
    for name in PACKAGES:
        module = importlib.import_module(f"chute.{name}")
        html = (tmp_path / f"{name}.html").read_text()
        documented = set(re.findall(rf'id="chute\.{name}\.([A-Za-z_0-9]+)"', html))
        missing += [f"chute.{name}.{n}" for n in module.__all__
                    if n not in documented and not n.isupper()]  # constants have no docstring
    assert not missing, f"public names without API docs: {missing}"
