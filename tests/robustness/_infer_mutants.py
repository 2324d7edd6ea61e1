"""Seeded mutants of an inference config file (issue 26 item 16): hostile values for every key,
`fn` specs that leave the config's folder (`..`, absolute paths, a symlink leading out, NUL
bytes), replica counts above the machine's cap, deleted and unknown keys, and broken text
(truncation, deep nesting, 5,000-digit integers, invalid UTF-8, YAML tags and alias bombs).

`write_clean(folder)` lays out the clean config (`c.json`), the stage file it names
(`stage.py`) and, in the parent folder, a file no config may import unless allowed
(`evil.py`, which leaves `ran` next to itself when imported). `mutants(folder, seed, count)`
returns (name, apply) pairs; `apply(folder)` rewrites the config in that folder and returns
its path. Everything is a pure function of the seed."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

Apply = Callable[[Path], Path]

CLEAN = {"stages": [
    {"name": "decode", "fn": "chute.infer:VideoClipLoader",
     "options": {"num_frames": 4, "size": 16}, "replicas": 1, "max_batch": 2},
    {"name": "model", "fn": "stage.py:build", "options": {"seed": 0}, "replicas": 2,
     "devices": ["cpu"], "max_batch": 4, "max_wait_ms": 5, "queue_size": 8, "threads": 1},
], "dataset": "videos.chute"}
KEYS = ["name", "fn", "options", "replicas", "devices", "max_batch", "max_wait_ms",
        "queue_size", "threads", "unknown"]
_VALUES = [None, -1, 0, 1, 2**31, 2**63, 10**30, 1.5, float("nan"), float("inf"), "x", "",
           [], {}, True, False, [[[[1]]]], {"a": {"b": 1}}, "cpu", ["cpu", 3], "cuda:99",
           "a" * 10000]
# specs that name files outside the folder: every one must be refused
_OUTSIDE = ["../evil.py:build", "{evil}:build", "sub/../../evil.py:build", "./../evil.py:build",
            "link.py:build", "linkdir/evil.py:build", "{parent}/../{name}/../evil.py:build"]
# specs that stay inside (or are modules): load, fail later if wrong
_INSIDE = ["stage.py:build", "./stage.py:build", "sub/../stage.py:build", "stage.py:nope",
           "missing.py:f", "os:system", "stage.py:", ":build", "stage.py\x00:build",
           "stage.py:build:extra", "..:x", "%2e%2e/evil.py:build", "stage.py" * 3000 + ":f"]
EVIL = ("import pathlib\npathlib.Path(__file__).with_name('ran').write_text('x')\n"
        "def build(**kw):\n    return lambda xs: xs\n")


def write_clean(folder: Path) -> Path:
    """The clean config in `folder` (made), its stage file, and `evil.py` one folder up."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stage.py").write_text("def build(seed=0, device='cpu'):\n"
                                     "    return lambda xs: xs\n")
    (folder.parent / "evil.py").write_text(EVIL)
    (folder / "c.json").write_text(json.dumps(CLEAN))
    return folder / "c.json"


def _config(change: Callable[[dict], None]) -> Apply:
    def apply(folder: Path) -> Path:
        data = json.loads(json.dumps(CLEAN))
        change(data)
        (folder / "c.json").write_text(json.dumps(data))
        return folder / "c.json"
    return apply


def _text(text: str | bytes, name: str = "c.json") -> Apply:
    def apply(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path
    return apply


def _m_value(rng: random.Random):
    stage, key, value = rng.randrange(2), rng.choice(KEYS), rng.choice(_VALUES)

    def change(data):
        data["stages"][stage][key] = value
    return f"value stages[{stage}].{key}={str(value)[:20]!r}", _config(change)


def _m_delete(rng: random.Random):
    stage, key = rng.randrange(2), rng.choice(["name", "fn", "options", "replicas", "devices"])

    def change(data):
        data["stages"][stage].pop(key, None)
    return f"delete stages[{stage}].{key}", _config(change)


def _m_spec(rng: random.Random):
    spec = rng.choice(_OUTSIDE + _INSIDE)

    def apply(folder: Path) -> Path:
        evil = folder.parent / "evil.py"
        if not (folder / "link.py").exists():
            os.symlink(evil, folder / "link.py")
            os.symlink(folder.parent, folder / "linkdir")
        fn = spec.format(evil=evil, parent=folder.parent, name=folder.name)
        return _config(lambda data: data["stages"][1].__setitem__("fn", fn))(folder)
    return f"spec {spec[:40]!r}", apply


def _m_replicas(rng: random.Random):
    value = rng.choice([100000, 2**31, 10**4, 4 * (os.cpu_count() or 1) + 1, 10**300])
    stage = rng.randrange(2)

    def change(data):
        data["stages"][stage]["replicas"] = value
    return f"replicas {str(value)[:12]}", _config(change)


def _m_top(rng: random.Random):
    which = rng.randrange(9)
    changes = [
        ("no stages", lambda d: d.pop("stages")),
        ("stages an object", lambda d: d.__setitem__("stages", {"a": 1})),
        ("empty stages", lambda d: d.__setitem__("stages", [])),
        ("a stage a string", lambda d: d["stages"].__setitem__(0, "decode")),
        ("dataset a list", lambda d: d.__setitem__("dataset", [1])),
        ("unknown top key", lambda d: d.__setitem__("allow_outside", True)),
        ("duplicate name", lambda d: d["stages"][1].__setitem__("name", "decode")),
        ("1000 stages", lambda d: d.__setitem__("stages", [
            {"name": f"s{k}", "fn": "stage.py:build"} for k in range(1000)])),
        ("options a list", lambda d: d["stages"][1].__setitem__("options", [1, 2])),
    ]
    name, change = changes[which]
    return f"top {name}", _config(change)


def _m_text(rng: random.Random):
    clean = json.dumps(CLEAN)
    which = rng.randrange(10)
    if which == 0:
        cut = rng.randrange(len(clean))
        return f"text cut at {cut}", _text(clean[:cut])
    if which == 1:
        return "text nested 100000 deep", _text("[" * 100000 + "]" * 100000)
    if which == 2:
        return "text replicas with 5000 digits", _text(clean.replace('"replicas": 2',
                                                                    '"replicas": ' + "9" * 5000))
    if which == 3:
        return "text invalid utf-8", _text(clean.encode().replace(b"model", b"mo\xff\xfeel"))
    if which == 4:
        return "text empty", _text("")
    if which == 5:
        return "text a folder", _folder_config
    if which == 6:
        return "yaml python tag", _text("stages:\n  - !!python/object/apply:os.system ['true']\n",
                                        "c.yaml")
    if which == 7:
        bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True))
        return "yaml alias bomb", _text(bomb + "stages:\n  - {name: x, fn: 'm:f', options: *i}\n",
                                        "c.yaml")
    if which == 8:
        return "text byte order mark", _text("\ufeff" + clean)
    return "text NaN replicas", _text(clean.replace('"replicas": 2', '"replicas": NaN'))


def _folder_config(folder: Path) -> Path:
    (folder / "c.json").unlink()
    (folder / "c.json").mkdir()
    return folder / "c.json"


_KINDS = [(_m_value, 4), (_m_delete, 1), (_m_spec, 3), (_m_replicas, 1), (_m_top, 1),
          (_m_text, 2)]


def mutants(seed: int, count: int) -> list[tuple[str, Apply]]:
    """`count` seeded mutants; each `apply(folder)` rewrites the config in a folder that
    `write_clean` laid out and returns the config's path."""
    rng = random.Random(seed)
    kinds = [k for k, weight in _KINDS for _ in range(weight)]
    out = []
    for k in range(count):
        name, apply = rng.choice(kinds)(rng)
        out.append((f"{k:03d} {name}", apply))
    return out


def outside_spec(config_path: Path) -> bool:
    """Whether the config at `config_path` names a "file.py" outside its folder (symlinks
    followed): a config that does must have been refused."""
    try:
        data = json.loads(config_path.read_text())
    except (OSError, ValueError, RecursionError):
        return False
    stages = data.get("stages") if isinstance(data, dict) else None
    base = config_path.parent.resolve()
    for stage in stages if isinstance(stages, list) else []:
        fn = stage.get("fn") if isinstance(stage, dict) else None
        where = fn.rpartition(":")[0] if isinstance(fn, str) else ""
        if where.endswith(".py") and "\x00" not in where:
            try:
                if not (base / where).resolve().is_relative_to(base):
                    return True
            except OSError:
                continue
    return False
