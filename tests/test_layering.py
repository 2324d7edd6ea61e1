"""The layers of chute depend one way: every import of every module under chute/ (at the top,
inside functions, relative, and lazy package attributes) goes to its own layer or one it may
use, and no two layers depend on each other in a circle.

Layers (what each may import besides itself; a layer may always import its own modules):

    base        chute.errors, chute._lazy, chute._version, ... small helpers: base only
    readers     reading the shard format: base
    convert     writing it (ShardWriter, parts, converters, metadata updates): base, readers
    fallbacks   CPU decoders: base (no files, no sampling: not readers)
    kernels     GPU kernels: base (likewise)
    autotune    measure/select/cache library: base (candidates and runner are injected;
                it knows nothing of Pipeline)
    pipelines   the Pipeline: base, readers, convert, fallbacks, kernels, autotune (which it
                calls for backend="auto")
    infer       inference pipelines: base, readers, convert, fallbacks, kernels, autotune,
                pipelines
    ray         chute on Ray Data (engines, Ray Dataset I/O): base, readers, convert
    app         the facade and commands (chute/__init__.py, chute.cli, chute._cli): anything
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

CHUTE = Path(__file__).resolve().parents[1] / "chute"

# module or package name -> layer; the longest matching prefix wins
LAYER_OF = {
    "chute": "app",  # the package facade: its lazy attributes reach every layer
    "chute.errors": "base",
    "chute._lazy": "base",
    "chute._version": "base",
    "chute._cache_dir": "base",
    "chute._device": "base",
    "chute._normalization": "base",
    "chute._output_types": "base",  # image layouts and output dtypes (numpy only)
    "chute._resize_box": "base",  # crop box geometry every image backend shares (numpy only)
    "chute._candidate": "base",  # the candidate value type producers and autotune share
    "chute._sample_images": "base",  # synthetic JPEGs (numpy + PIL only), for demo and tests
    "chute._fork": "base",  # locks, pools and state a forked child renews
    "chute._native_build": "base",  # builds C shims (fallbacks' decoders, readers' chunks)
    "chute._sndfile_read": "base",  # frames read with libsndfile directly (soundfile only)
    "chute._pil_rgb": "base",  # 16-bit grey PIL images to 8 bits (numpy + PIL only)
    "chute.readers": "readers",
    "chute.convert": "convert",
    "chute.fallbacks": "fallbacks",
    "chute.kernels": "kernels",
    "chute.autotune": "autotune",
    "chute.pipelines": "pipelines",
    "chute.infer": "infer",
    "chute.ray": "ray",
    "chute.cli": "app",
    "chute._cli": "app",
}

MAY_IMPORT = {
    "base": {"base"},
    "readers": {"base"},
    "convert": {"base", "readers"},
    "fallbacks": {"base"},
    "kernels": {"base"},
    "autotune": {"base"},
    "pipelines": {"base", "readers", "convert", "fallbacks", "kernels", "autotune"},
    "infer": {"base", "readers", "convert", "fallbacks", "kernels", "autotune", "pipelines"},
    "ray": {"base", "readers", "convert"},
    "app": {"base", "readers", "convert", "fallbacks", "kernels", "autotune", "pipelines",
            "infer", "ray"},
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported chute module (or package)
    where: str  # file:line
    named: str = ""  # the chute module the statement names (a package, for its lazy names)

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def module_files(root: Path = CHUTE) -> dict[str, Path]:
    """Every module under `root` by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@functools.cache  # every `from package import ...` asks again: parsing each time took 2 s
def _lazy_names(path: Path) -> dict[str, str]:
    """A package's `_LAZY = {name: module}` table (chute/_lazy.py), read from the source."""
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "_LAZY" and node.value is not None:
            return ast.literal_eval(node.value)
    return {}


def _base_of_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def collect_imports(module: str, source: str, path: str, modules: dict[str, Path],
                    is_package: bool = False) -> list[Import]:
    """Every chute import in `source` (the text of `module`), anywhere in the file.

    `from package import name` counts as importing the submodule `package.name` when there is
    one, the module a lazy `_LAZY` table maps `name` to when there is one, else `package`.
    """
    found = []

    def add(target: str, line: int, named: str = "") -> None:
        found_here = Import(module, target, f"{path}:{line}", named or target)
        if (target == "chute" or target.startswith("chute.")) and found_here not in found:
            found.append(found_here)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _base_of_from(module, is_package, node)
            lazy = _lazy_names(modules[base]) if base in modules else {}
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    add(sub, node.lineno)
                else:
                    add(lazy.get(alias.name, base), node.lineno, base)
    # a package's lazy attributes import their modules when first used
    if is_package:
        lazy = _lazy_names(modules[module]) if module in modules else {}
        for target in sorted(set(lazy.values())):
            add(target, 0)
    return found


def layer_of(module: str) -> str | None:
    best = max((name for name in LAYER_OF
                if module == name or module.startswith(name + ".")), key=len, default=None)
    return LAYER_OF.get(best) if best else None


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return module_files()


@pytest.fixture(scope="module")
def imports(modules) -> list[Import]:
    out = []
    root = CHUTE.parent
    for name, path in modules.items():
        out += collect_imports(name, path.read_text(), str(path.relative_to(root)), modules,
                               is_package=path.name == "__init__.py")
    return out


def test_every_module_has_a_layer(modules):
    missing = [name for name in modules if layer_of(name) is None]
    assert not missing, (f"modules with no layer: {missing}; add them to LAYER_OF in "
                         "tests/test_layering.py")


def _allowed(layer: str) -> set[str]:
    return MAY_IMPORT[layer] | {layer}


def test_no_upward_import(imports):
    bad = [f"{i}  ({layer_of(i.source)} may import only "
           f"{', '.join(sorted(_allowed(layer_of(i.source))))}; {i.target} is "
           f"{layer_of(i.target)})"
           for i in imports
           if layer_of(i.target) not in _allowed(layer_of(i.source))]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_allowed_layers_form_no_circle():
    edges = {layer: allowed - {layer} for layer, allowed in MAY_IMPORT.items()}
    assert _cycle(edges) is None


def test_no_circle_between_layers(imports):
    edges: dict[str, set[str]] = {}
    seen: dict[tuple[str, str], Import] = {}
    for i in imports:
        a, b = layer_of(i.source), layer_of(i.target)
        if a != b:
            edges.setdefault(a, set()).add(b)
            seen.setdefault((a, b), i)
    cycle = _cycle(edges)
    assert cycle is None, ("layers import each other in a circle: " + " -> ".join(cycle) + "\n"
                           + "\n".join(str(seen[e]) for e in pairwise(cycle)))


@pytest.mark.parametrize("source, target", [("autotune", "pipelines"), ("autotune", "infer"),
                                            ("pipelines", "infer")])
def test_lower_layers_do_not_import_the_ones_above(imports, source, target):
    bad = [str(i) for i in imports
           if layer_of(i.source) == source and layer_of(i.target) == target]
    assert not bad, f"chute.{source} must not import chute.{target}:\n" + "\n".join(bad)


# packages whose modules other packages use only through the names their __init__ exports
PACKAGES = ("chute.readers", "chute.convert", "chute.fallbacks", "chute.kernels", "chute.autotune",
            "chute.pipelines", "chute.infer", "chute._cli")


def package_of(module: str) -> str | None:
    return next((p for p in PACKAGES if module == p or module.startswith(p + ".")), None)


def crosses_into_private(i: Import) -> bool:
    """Whether `i` names a private module (a part starting with "_" below the package) of a
    package other than its own."""
    package = package_of(i.named)
    if package is None or package_of(i.source) == package:
        return False
    return any(part.startswith("_") for part in i.named[len(package) + 1:].split(".") if part)


def test_no_package_imports_another_packages_private_modules(imports):
    """A package uses another through the public names the other exports in its __init__'s
    `__all__` (lazy `_LAZY` names included): `from chute.fallbacks import DecodeStatus`, not
    `from chute.fallbacks._status import DecodeStatus`. Tests may still import private modules."""
    bad = [f"{i}  (import a public name of {package_of(i.named)}; export it in its __all__)"
           for i in imports if crosses_into_private(i)]
    assert not bad, "imports of another package's private modules:\n" + "\n".join(bad)


def test_private_crossings_are_told_from_public_and_lazy_names(tmp_path):
    (tmp_path / "chute" / "readers").mkdir(parents=True)
    (tmp_path / "chute" / "pipelines").mkdir()
    for name in ("__init__.py", "readers/_a.py", "readers/_b.py", "pipelines/__init__.py",
                 "pipelines/x.py"):
        (tmp_path / "chute" / name).touch()
    (tmp_path / "chute" / "readers" / "__init__.py").write_text(
        '_LAZY = {"lazy_name": "chute.readers._a"}\n')
    modules = module_files(tmp_path / "chute")
    source = (
        "from chute.readers import lazy_name\n"
        "from chute.readers import _b\n"
        "def f():\n"
        "    from chute.readers._a import thing\n"
        "    import chute.readers._b\n"
    )
    found = collect_imports("chute.pipelines.x", source, "x.py", modules)
    assert [i.where for i in found if crosses_into_private(i)] == ["x.py:2", "x.py:4", "x.py:5"]
    own = collect_imports("chute.readers._b", "from chute.readers._a import thing\n", "b.py",
                          modules)
    assert not any(crosses_into_private(i) for i in own)


def test_no_injection_layer_is_left():
    """The autotuner is a library below pipelines, called by them: no module exists only to
    register it (docs/design.md, "Layers")."""
    leftovers = sorted(p.name for p in CHUTE.glob("_auto_*.py")) + \
        sorted(p.name for p in CHUTE.glob("_pipeline_entry.py"))
    assert not leftovers


def test_collector_sees_imports_in_functions_relative_and_lazy(tmp_path):
    (tmp_path / "chute" / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "errors.py", "pkg/__init__.py", "pkg/a.py", "pkg/b.py"):
        (tmp_path / "chute" / name).touch()
    (tmp_path / "chute" / "__init__.py").write_text('_LAZY = {"Thing": "chute.pkg.b"}\n')
    modules = module_files(tmp_path / "chute")
    source = (
        "import os\n"
        "from . import b\n"
        "from .. import errors\n"
        "def f():\n"
        "    import chute.pkg.b as x\n"
        "    from chute import Thing\n"
        "    from chute.errors import ChuteError\n"
    )
    got = [(i.target, i.where) for i in collect_imports("chute.pkg.a", source, "a.py", modules)]
    assert got == [("chute.pkg.b", "a.py:2"), ("chute.errors", "a.py:3"),
                   ("chute.pkg.b", "a.py:5"), ("chute.pkg.b", "a.py:6"),
                   ("chute.errors", "a.py:7")]
    package = collect_imports("chute", "", "chute/__init__.py", modules, is_package=True)
    assert [i.target for i in package] == ["chute.pkg.b"]


# The Pipeline's core modules, which import no modality folder (_compat, which translates the
# old per-kind keywords, and the facade __init__, which re-exports the option types, do)
_MODALITY_FREE_CORE = ("chute.pipelines._common", "chute.pipelines._run",
                       "chute.pipelines._staging", "chute.pipelines._prefetch",
                       "chute.pipelines._substitute", "chute.pipelines._assembly",
                       "chute.pipelines._cursor", "chute.pipelines._order",
                       "chute.pipelines._bad_samples", "chute.pipelines._pipeline",
                       "chute.pipelines._fields", "chute.pipelines.sampling",
                       "chute.pipelines.producers._inflight",
                       "chute.pipelines.producers._contract", "chute.pipelines.producers._by_row",
                       "chute.pipelines.producers._family", "chute.pipelines.producers._registry")
_MODALITY_FOLDERS = tuple(f"chute.pipelines.producers.{name}" for name in
                          ("image", "video", "audio", "stored"))


def test_the_core_imports_no_modality_folder(imports):
    """The plan's requests, the run, staging, prefetch, stage timers, substitution and the
    shared producer machinery import no producer folder: what a modality needs (its crops,
    its parameter sources) lives in its folder (docs/design.md, "Plans and producers")."""
    bad = [str(i) for i in imports
           if i.source.startswith(_MODALITY_FREE_CORE)
           and i.target.startswith(_MODALITY_FOLDERS)]
    assert not bad, "core modules importing a modality's folder:\n" + "\n".join(bad)


def _dataset_capabilities() -> set[str]:
    """Every member `DatasetProtocol` declares, optional ones (with their defaults) included."""
    from chute.readers import DatasetProtocol

    return set(DatasetProtocol.__annotations__) | {
        name for name in vars(DatasetProtocol) if not name.startswith("_")}


def capability_reads(source: str, path: str, capabilities: set[str]) -> list[str]:
    """`getattr`/`hasattr` calls in `source` that read one of `capabilities` by name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in capabilities:
            found.append(f"{path}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_pipelines_read_dataset_capabilities_typed():
    """What pipelines/ needs of a dataset is declared on `DatasetProtocol` (optional members
    with their defaults), so it is read as an attribute, never probed with getattr/hasattr
    (docs/design.md, "Storage and identity")."""
    capabilities = _dataset_capabilities()
    assert {"sampler", "ref", "why_missing", "delivered_fields", "close"} <= capabilities
    assert capability_reads('getattr(ds, "sampler", None)\nhasattr(x, "threads")\n', "x.py",
                            capabilities) == ["x.py:1: getattr(..., 'sampler')"]
    bad = []
    for path in sorted((CHUTE / "pipelines").rglob("*.py")):
        bad += capability_reads(path.read_text(), str(path.relative_to(CHUTE.parent)),
                                capabilities)
    assert not bad, ("dataset capabilities probed by name; declare them on DatasetProtocol "
                     "and read them as attributes:\n" + "\n".join(bad))


# Layers inside pipelines/ (docs/design.md, "Layers inside pipelines/"): the producers and the
# sampling sit below the Pipeline, and each modality folder keeps to itself.
_BELOW_THE_PIPELINE = ("chute.pipelines.producers", "chute.pipelines.sampling")
_PRODUCERS = "chute.pipelines.producers."
def _modality_folder(module: str) -> str | None:
    """The modality folder (producers/<name>/, name not private) `module` lies in, if any."""
    if not module.startswith(_PRODUCERS):
        return None
    name = module[len(_PRODUCERS):].split(".")[0]
    return None if name.startswith("_") or "." not in module[len(_PRODUCERS):] else \
        _PRODUCERS + name


def test_nothing_below_the_pipeline_imports_it(imports):
    """The producers and the sampling never build a Pipeline themselves: backend="auto" gets
    its measuring Pipelines through `producers/_tune_runner.open_pipeline`, which
    `_pipeline.py` hands its class to."""
    bad = [str(i) for i in imports
           if i.source.startswith(_BELOW_THE_PIPELINE) and i.target == "chute.pipelines._pipeline"]
    assert not bad, "modules below the Pipeline importing it:\n" + "\n".join(bad)


def test_no_producer_module_imports_another_modality_folder(imports):
    crossings = set()
    for i in imports:
        target = _modality_folder(i.target)
        if i.source.startswith(_BELOW_THE_PIPELINE) and target is not None \
                and _modality_folder(i.source) != target:
            crossings.add((i.source, i.target))
    assert not crossings, ("modules importing a modality folder other than their own:\n"
                           + "\n".join(f"{s} imports {t}" for s, t in sorted(crossings)))


def test_sub_layer_rules_see_function_level_imports(tmp_path):
    (tmp_path / "chute" / "pipelines" / "producers" / "image").mkdir(parents=True)
    for name in ("__init__.py", "pipelines/__init__.py", "pipelines/_pipeline.py",
                 "pipelines/producers/__init__.py", "pipelines/producers/image/__init__.py",
                 "pipelines/producers/image/_x.py", "pipelines/producers/_y.py"):
        (tmp_path / "chute" / name).touch()
    modules = module_files(tmp_path / "chute")
    source = ("def f():\n"
              "    from chute.pipelines._pipeline import Pipeline\n"
              "    from chute.pipelines.producers.image._x import g\n")
    found = collect_imports("chute.pipelines.producers._y", source, "y.py", modules)
    assert [(i.target, _modality_folder(i.target)) for i in found] == [
        ("chute.pipelines._pipeline", None),
        ("chute.pipelines.producers.image._x", "chute.pipelines.producers.image")]


def test_auto_builds_its_measuring_pipelines_through_the_class_handed_in(monkeypatch):
    from chute.errors import ChuteError
    from chute.pipelines import Pipeline
    from chute.pipelines.producers import _tune_runner

    assert _tune_runner._PIPELINE == [Pipeline]  # handed in when _pipeline.py is imported
    made = []
    monkeypatch.setattr(_tune_runner, "_PIPELINE", [lambda *a, **k: made.append((a, k))])
    _tune_runner.open_pipeline("ds", 4, device="cpu")
    assert made == [(("ds", 4), {"device": "cpu"})]
    monkeypatch.setattr(_tune_runner, "_PIPELINE", [])
    with pytest.raises(ChuteError, match="import chute.pipelines"):
        _tune_runner.open_pipeline("ds", 4)


# Folders of pipelines/ never import each other in a circle: what several of them use lives in
# pipelines/_common/, which imports none of them (docs/design.md, "Layers inside pipelines/").
_P = "chute.pipelines"


def folder_loops(imports, modules) -> set[tuple[str, str]]:
    """Edges between folders of pipelines/ (any import, function-level ones included; package
    facades, which re-export, left out as importers) that lie on a cycle of folders."""

    def folder(module: str) -> str:
        return module if modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]

    edges: dict[str, set[str]] = {}
    for i in imports:
        if i.source.startswith(_P) and i.target.startswith(_P) \
                and modules[i.source].name != "__init__.py":
            a, b = folder(i.source), folder(i.target)
            if a != b:
                edges.setdefault(a, set()).add(b)

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return {(a, b) for a, targets in edges.items() for b in targets if a in reaches(b)}


def test_no_import_loop_between_folders_of_pipelines(imports, modules):
    loops = folder_loops(imports, modules)
    assert not loops, ("folders of pipelines/ importing each other in a circle:\n"
                       + "\n".join(f"{a} -> {b}" for a, b in sorted(loops)))


def test_folder_loops_are_found_through_function_level_imports(tmp_path):
    (tmp_path / "chute" / "pipelines" / "producers").mkdir(parents=True)
    for name in ("__init__.py", "pipelines/__init__.py", "pipelines/_a.py",
                 "pipelines/producers/__init__.py", "pipelines/producers/_b.py"):
        (tmp_path / "chute" / name).touch()
    modules = module_files(tmp_path / "chute")
    found = collect_imports("chute.pipelines._a", "from chute.pipelines.producers._b import x\n",
                            "a.py", modules)
    assert folder_loops(found, modules) == set()
    found += collect_imports("chute.pipelines.producers._b",
                             "def f():\n    from chute.pipelines._a import y\n", "b.py", modules)
    assert folder_loops(found, modules) == {("chute.pipelines", "chute.pipelines.producers"),
                                            ("chute.pipelines.producers", "chute.pipelines")}


# Modules of pipelines/ that still name a field kind, and why; the core (the Pipeline, its run,
# assembly, cursor and order, the batching contract, _common/) names none: it asks the family.
_NAMING_KINDS = {
    "_compat.py": "translates the round-2 keywords, which were per kind (image_size=, unit=)",
    "_fields.py": "the documented default of fields=: 'image' and 'label'",
    "_mix.py": "MixedDataset.views/gather default to the 'image' field, as Dataset's do",
}
_KINDS = {"image", "video", "audio", "segment", "recording", "ndarray", "stored"}


def _kind_names(path: Path) -> list[tuple[int, str]]:
    """(line, kind) of every string constant naming a field kind, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and n.value in _KINDS and id(n) not in docs]


def test_no_core_module_names_a_field_kind():
    root = Path(__file__).resolve().parents[1] / "chute" / "pipelines"
    core = [*root.glob("*.py"), *(root / "sampling").glob("*.py"), *(root / "_common").glob("*.py")]
    named = {str(p.relative_to(root)): _kind_names(p) for p in core}
    bad = {p: hits for p, hits in named.items() if hits and p not in _NAMING_KINDS}
    assert not bad, f"core modules naming a field kind (ask the field's family instead): {bad}"
    stale = [p for p in _NAMING_KINDS if not named.get(p)]
    assert not stale, f"these no longer name a kind: remove them from _NAMING_KINDS: {stale}"


def test_kind_names_are_found_outside_docstrings(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""image docs"""\ndef f(family):\n    """video"""\n'
                    '    return family == "image"\n')
    assert _kind_names(path) == [(4, "image")]


def test_the_pipeline_class_is_small():
    """The Pipeline holds the order and iteration; fields, epochs and failures live in their
    own modules (docs/design.md, "Layers inside pipelines/": at most 300 lines)."""
    import inspect

    from chute.pipelines import Pipeline

    assert len(inspect.getsource(Pipeline).splitlines()) <= 300


def test_storage_sits_below_the_format_and_the_dataset(imports):
    """readers/storage/ is where bytes live: it imports nothing of readers above it (the
    Dataset, the format, the kinds), so opening a dataset is not a loop through storage."""
    allowed = ("chute.readers.storage", "chute.readers._sizes")
    bad = [str(i) for i in imports
           if i.source.startswith("chute.readers.storage") and layer_of(i.target) == "readers"
           and not i.target.startswith(allowed)]
    assert not bad, "storage importing readers above it:\n" + "\n".join(bad)


def test_one_opener_tells_local_from_remote():
    """Only readers/_open.py branches on `is_remote` to open a dataset (open_dataset, open_url
    and DatasetRef.open go through it); _inspect.py only names what kind of dataset it was
    given (what verify checks, the path it reports)."""
    readers = CHUTE / "readers"
    callers = sorted(str(p.relative_to(CHUTE)) for p in readers.rglob("*.py")
                     if "is_remote(" in p.read_text() and "storage" not in p.parts)
    assert callers == ["readers/_inspect.py", "readers/_open.py"], callers
