"""Every test that starts a process is marked `slow`, so `-m "not slow"` stays a fast lane.

The check reads the test modules with `ast` (nothing is imported): a call into subprocess,
multiprocessing, torch.multiprocessing (mp.spawn, get_context, Process, Pool, ...) or os.fork /
os.system / os.posix_spawn* needs `pytestmark = pytest.mark.slow` (alone or in a list) in its
module, or, when the call sits inside a test function or test class, `@pytest.mark.slow` on
that test or class. A call in a helper or fixture needs the module-level mark. Processes that
chute itself starts (InferServer replicas, convert worker pools) are not seen here; the tests
that pay for them were marked by hand (docs/testing.md).
"""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PROCESS_MODULES = ("subprocess", "multiprocessing", "torch.multiprocessing")
PROCESS_OS_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp",
                    "spawnv", "spawnve", "spawnl", "spawnle", "execv", "execve"}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it stands for, from every import in the module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _starts_process(call: ast.Call, aliases: dict[str, str]) -> bool:
    name = _dotted(call.func)
    if name is None:
        return False
    head, _, rest = name.partition(".")
    full = aliases.get(head, head) + ("." + rest if rest else "")
    if any(full == m or full.startswith(m + ".") for m in PROCESS_MODULES):
        return True
    return full.startswith("os.") and full[3:] in PROCESS_OS_CALLS


def _is_slow_mark(node: ast.expr) -> bool:
    """pytest.mark.slow, pytest.mark.slow(...), or a list/tuple holding one."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow_mark(e) for e in node.elts)
    if isinstance(node, ast.Call):
        node = node.func
    name = _dotted(node) or ""
    return name == "slow" or name.endswith("mark.slow")


def _has_pytestmark_slow(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) \
                    and stmt.value is not None and _is_slow_mark(stmt.value):
                return True
    return False


def _test_slow(node: ast.stmt) -> bool | None:
    """For a test function/class: whether it is marked slow. None for anything else."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
        return any(_is_slow_mark(d) for d in node.decorator_list)
    if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
        return any(_is_slow_mark(d) for d in node.decorator_list) \
            or _has_pytestmark_slow(node.body)
    return None


def unmarked_process_calls(source: str) -> list[str]:
    """'line N (where)' for each process-starting call that no `slow` mark covers."""
    tree = ast.parse(source)
    if _has_pytestmark_slow(tree.body):
        return []
    aliases = _aliases(tree)
    problems = []
    for top in tree.body:
        slow = _test_slow(top)
        if slow:
            continue
        where = getattr(top, "name", "module level")
        hint = "mark the test" if slow is False else "helper/fixture: mark the module"
        for node in ast.walk(top):
            if isinstance(node, ast.Call) and _starts_process(node, aliases):
                problems.append(f"line {node.lineno} in {where} ({hint})")
    return problems


def test_every_test_that_starts_a_process_is_marked_slow():
    found = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        problems = unmarked_process_calls(path.read_text())
        if problems:
            found[str(path.relative_to(TESTS.parent))] = problems
    assert not found, (
        "these tests start processes but are not marked slow (add `pytestmark = "
        "pytest.mark.slow` to the module, or `@pytest.mark.slow` to the test):\n"
        + "\n".join(f"  {p}: {', '.join(v)}" for p, v in found.items()))


def test_the_check_sees_calls_and_marks():
    bare = "import subprocess\n\ndef test_a():\n    subprocess.run(['true'])\n"
    assert unmarked_process_calls(bare) == ["line 4 in test_a (mark the test)"]
    assert unmarked_process_calls(
        "import pytest\n" + bare.replace("def test_a", "@pytest.mark.slow\ndef test_a")) == []
    assert unmarked_process_calls(
        "import pytest\npytestmark = [pytest.mark.gpu, pytest.mark.slow]\n" + bare) == []
    spawn = ("def helper():\n    import torch.multiprocessing as mp\n    mp.spawn(f, nprocs=2)\n"
             "\ndef test_b():\n    helper()\n")
    assert unmarked_process_calls(spawn) == [
        "line 3 in helper (helper/fixture: mark the module)"]
    assert unmarked_process_calls(
        "import os\nfrom multiprocessing import get_context\n\ndef test_c():\n"
        "    os.fork()\n    get_context('fork')\n    os.getpid()\n") == [
        "line 5 in test_c (mark the test)", "line 6 in test_c (mark the test)"]
    assert unmarked_process_calls("import json\n\ndef test_d():\n    json.dumps(1)\n") == []
