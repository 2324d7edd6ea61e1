"""The Python examples of README.md and docs/*.md match the code they show: every fenced
`python` block parses, and every call of a public chute name in it (`Pipeline(...)`,
`ImageOptions(...)`, `chute.mix(...)`, `FbankOptions.preset(...)`, ...) passes arguments its
signature accepts: no renamed or removed keyword, no extra positional argument.

Every `chute ...` line of a shell example (`bash`, usage lines with their [optional] parts)
parses with chute's own argument parser: a renamed or removed option fails. Running them needs
the data they name (`/data/...`); the Python examples run in tests/test_docs_run.py."""

from __future__ import annotations

import ast
import inspect
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_OPEN = re.compile(r"^ {0,3}```python\s*$")
_CLOSE = re.compile(r"^ {0,3}```\s*$")
# where examples find chute's public names (each module's __all__)
_MODULES = ("chute", "chute.pipelines", "chute.readers", "chute.convert", "chute.infer",
            "chute.ray", "chute.autotune")


def _examples() -> list[tuple[str, int, str]]:
    """(file, first line, code) of every fenced python block."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        start = None
        for number, line in enumerate(lines, 1):
            if start is None and _OPEN.match(line):
                start = number
            elif start is not None and _CLOSE.match(line):
                found.append((str(path.relative_to(ROOT)), start + 1,
                              "\n".join(lines[start:number - 1])))
                start = None
    return found


def _public() -> dict[str, object]:
    import importlib

    names: dict[str, object] = {}
    for module_name in _MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional extra (ray) that is not installed
            continue
        for name in getattr(module, "__all__", ()):
            names.setdefault(name, getattr(module, name))
        names.setdefault(module_name.rpartition(".")[2], module)
    return names


def _resolve(node: ast.expr, public: dict[str, object]) -> object | None:
    """The chute object a call's function names (`Pipeline`, `chute.mix`,
    `FbankOptions.preset`), else None."""
    if isinstance(node, ast.Name):
        return public.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, public)
        if owner is not None and (inspect.ismodule(owner) or inspect.isclass(owner)):
            return getattr(owner, node.attr, None)
    return None


def _bad_calls(code: str, public: dict[str, object]) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        target = _resolve(node.func, public)
        if target is None or not callable(target):
            continue
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or \
                any(k.arg is None for k in node.keywords):
            continue  # *args / **kwargs: not checked statically
        try:
            signature.bind_partial(*node.args, **{k.arg: k.value for k in node.keywords
                                                  if k.arg is not None})
        except TypeError as exc:
            bad.append(f"line {node.lineno}: {ast.unparse(node.func)}(...): {exc}")
    return bad


EXAMPLES = _examples()


def test_the_docs_have_examples_to_check():
    assert len(EXAMPLES) >= 20, [f for f, _, _ in EXAMPLES]


@pytest.mark.parametrize(("file", "line", "code"), EXAMPLES,
                         ids=[f"{f}:{n}" for f, n, _ in EXAMPLES])
def test_every_example_parses_and_calls_chute_as_its_signatures_allow(file, line, code):
    try:
        ast.parse(code)
    except SyntaxError as exc:
        pytest.fail(f"{file}:{line + (exc.lineno or 1) - 1}: not Python: {exc.msg}")
    bad = _bad_calls(code, _public())
    assert not bad, f"{file} (example from line {line}): " + "; ".join(bad)


def test_a_renamed_keyword_is_caught():
    """The check can fail: the round-2 spelling `image_size=` of ImageOptions is reported."""
    bad = _bad_calls("ImageOptions(image_size=224)\nchute.mix({}, weight={})", _public())
    assert len(bad) == 2 and "image_size" in bad[0] and "weight" in bad[1], bad


_SHELL_OPEN = re.compile(r"^ {0,3}```(bash|sh|shell|console)\s*$")


def _chute_lines() -> list[tuple[str, int, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        inside, pending, start = False, "", 0
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _SHELL_OPEN.match(line):
                inside = True
            elif inside and line.strip().startswith("```"):
                inside = False
            elif inside:
                pending, start = pending + " " + line.strip(), start or number
                if pending.endswith("\\"):  # continued on the next line
                    pending = pending[:-1]
                    continue
                command, pending, first = pending.strip().removeprefix("$ "), "", start
                start = 0
                if re.match(r"(\S+=\S+ )*chute\s", command):
                    found.append((str(path.relative_to(ROOT)), first, command))
    return found


CHUTE_LINES = _chute_lines()


def test_the_docs_have_shell_examples_to_check():
    assert len(CHUTE_LINES) >= 20, CHUTE_LINES


@pytest.mark.parametrize(("file", "line", "command"), CHUTE_LINES,
                         ids=[f"{f}:{n}" for f, n, _ in CHUTE_LINES])
def test_every_chute_command_line_parses(file, line, command, capsys):
    from chute.cli import build_parser

    # a usage line: its [optional] parts are checked too; "A|B" takes A; "..." says "and more"
    usage = re.sub(r"\[same options\]|\.\.\.", " ", command).replace("[", " ").replace("]", " ")
    words = [w.split("|")[0] if w.startswith("-") or "|" not in w[:1] else w
             for w in shlex.split(usage, comments=True)]
    words = ["1" if re.fullmatch(r"[A-Z]", w) else w for w in words]  # a number placeholder (N)
    while words and "=" in words[0]:  # VAR=value before the command
        words.pop(0)
    if "|" in words:
        words = words[:words.index("|")]
    try:
        build_parser().parse_args(words[1:])
    except SystemExit as exc:
        if exc.code not in (0, None):  # --help exits 0
            pytest.fail(f"{file}:{line}: `{command}`: {capsys.readouterr().err.strip()}")


def test_a_renamed_option_is_caught(capsys):
    from chute.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "train.chute", "--image-sizes", "224"])
    assert exc.value.code == 2

