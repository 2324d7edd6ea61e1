"""The shape of a `chute.json`, checked before anything uses it: every key a reader touches is
there with the right type and a sane range, and every name it holds is a plain path component
(`readers/storage/_paths.py`). A malformed manifest is a FormatError naming the file and the
key, never a raw KeyError or TypeError later on."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from chute.errors import FormatError
from chute.readers.kinds._kinds import KINDS
from chute.readers.storage._files import CHECKSUM
from chute.readers.storage._node_cache import cache_name_problem
from chute.readers.storage._paths import plain_name

__all__ = ["check_manifest", "MAX_COUNT"]

# Sample counts and byte sizes stay far below 2^63 so sums and products never wrap in int64.
MAX_COUNT = 1 << 56
FORMAT = "chute"
VERSION = 1


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT


def check_manifest(path: Path, m) -> None:
    """Raise FormatError naming `path` and the key when manifest `m` is malformed."""
    def bad(what: str) -> NoReturn:
        raise FormatError(f"{path}: {what}; the manifest is corrupt or from another tool")

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        bad(f"format is not {FORMAT!r}")
    if m.get("version") != VERSION:
        bad(f"version {m.get('version')!r} is not supported (this chute reads {VERSION})")
    for key in ("num_samples", "fields", "shards"):
        if key not in m:
            bad(f"missing {key!r}")
    if m.get("checksum", CHECKSUM) != CHECKSUM:
        bad(f"'checksum' is {m['checksum']!r}; this chute checks {CHECKSUM!r}")
    own = m.get("manifest_xxh3_64")
    if own is not None and not (isinstance(own, str) and len(own) == 16):
        bad(f"'manifest_xxh3_64' is {own!r}, not a 16-digit checksum")
    if not _count(m["num_samples"]):
        bad(f"'num_samples' is {m['num_samples']!r}, not a sample count")
    names = m.get("class_names")
    if names is not None and not (isinstance(names, list) and
                                  all(isinstance(n, str) for n in names)):
        bad(f"'class_names' must be a list of strings or null, is {type(names).__name__}")
    if not isinstance(m["fields"], dict):
        bad(f"'fields' must be an object (field -> spec), is {type(m['fields']).__name__}")
    for name, spec in m["fields"].items():
        plain_name(name, "field name", path)
        given = spec.get("kind") if isinstance(spec, dict) else spec
        kind = KINDS.get(given) if isinstance(given, str) else None
        if kind is None:
            bad(f"field {name!r} has unknown 'kind' {given!r} (known: {sorted(KINDS)})")
        if "file" in spec:
            plain_name(spec["file"], f"field {name!r} 'file'", path)
            _cacheable(spec["file"], f"field {name!r} 'file'", bad)
        try:
            problem = kind.check(name, spec)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            problem = f"field {name!r} has a malformed spec ({type(exc).__name__}: {exc})"
        if problem:
            bad(problem)
    _check_shards(path, m, bad)


def _cacheable(name: str, what: str, bad) -> None:
    """Shard folders and files are names in the node cache too, beside its own bookkeeping
    (docs/storage.md, "The node cache")."""
    problem = cache_name_problem(name)
    if problem:
        bad(f"{what} {name[:80]!r} {problem}")


def _check_shards(path: Path, m: dict, bad) -> None:
    shards = m["shards"]
    if not isinstance(shards, list):
        bad(f"'shards' must be a list, is {type(shards).__name__}")
    seen = set()
    total = 0
    for k, shard in enumerate(shards):
        where = f"shards[{k}]"
        if not isinstance(shard, dict):
            bad(f"{where} must be an object, is {type(shard).__name__}")
        for key in ("name", "num_samples", "files"):
            if key not in shard:
                bad(f"{where} has no {key!r}")
        name = plain_name(shard["name"], f"{where} 'name'", path)
        _cacheable(name, f"{where} 'name'", bad)
        if name in seen:
            bad(f"shard {name!r} is listed twice in 'shards' (its samples would be read twice)")
        seen.add(name)
        if not _count(shard["num_samples"]):
            bad(f"{where} 'num_samples' is {shard['num_samples']!r}, not a sample count")
        total += shard["num_samples"]
        if not isinstance(shard["files"], dict):
            bad(f"{where} 'files' must be an object (file name -> entry)")
        for fname, entry in shard["files"].items():
            plain_name(fname, f"{where} file", path)
            _cacheable(fname, f"{where} file", bad)
            if not isinstance(entry, dict) or not _count(entry.get("size")):
                bad(f"{where} 'files' entry {fname!r} needs a byte 'size' (has {entry!r})")
            if not isinstance(entry.get(CHECKSUM, ""), str):
                bad(f"{where} 'files' entry {fname!r} has a non-string {CHECKSUM!r}")
    if total != m["num_samples"]:
        bad(f"shard sample counts sum to {total}, num_samples says {m['num_samples']}")
