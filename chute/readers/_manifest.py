"""The dataset manifest `chute.json`: fields and kinds, shards, per-file sizes and checksums.

{
  "format": "chute", "version": 1, "checksum": "xxh3_64",
  "num_samples": N,
  "fields": {"image": {"kind": "bytes"}, "label": {"kind": "scalar", "dtype": "int64"},
             "meta": {"kind": "json", "file": "meta"}},
  "shards": [{"name": "00000", "num_samples": n,
              "files": {"image.bin": {"size": S, "xxh3_64": "..."}, ...}}],
  "class_names": [...] | null
}
Which files a field has in every shard folder is its kind's business (`_kinds.py`); their stem
is `file`, which defaults to the field name (metadata updates write a new generation).
"""

from __future__ import annotations

import json
from pathlib import Path

import xxhash

from chute.errors import FormatError
from chute.readers._files import CHECKSUM, atomic_write_bytes, fsync_dir
from chute.readers._kinds import KINDS

__all__ = ["MANIFEST", "FORMAT", "VERSION", "load_manifest", "write_manifest",
           "manifest_fingerprint"]

MANIFEST = "chute.json"
FORMAT = "chute"
VERSION = 1


def load_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise FormatError(f"{root}: not a chute dataset (no {MANIFEST}); create one with "
                          "`chute convert`, or the conversion was interrupted") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: manifest is not valid JSON ({exc}); restore it") from None
    _check(path, manifest)
    return manifest


def _check(path: Path, m: dict) -> None:
    def bad(what: str):
        raise FormatError(f"{path}: {what}; the manifest is corrupt or from another tool")

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        bad(f"format is not {FORMAT!r}")
    if m.get("version") != VERSION:
        bad(f"version {m.get('version')!r} is not supported (this chute reads {VERSION})")
    for key in ("num_samples", "fields", "shards"):
        if key not in m:
            bad(f"missing {key!r}")
    for name, spec in m["fields"].items():
        kind = KINDS.get(spec.get("kind")) if isinstance(spec, dict) else None
        if kind is None:
            given = spec.get("kind") if isinstance(spec, dict) else spec
            bad(f"field {name!r} has unknown kind {given!r} (known: {sorted(KINDS)})")
        problem = kind.check(name, spec)
        if problem:
            bad(problem)
    total = sum(s["num_samples"] for s in m["shards"])
    if total != m["num_samples"]:
        bad(f"shard sample counts sum to {total}, num_samples says {m['num_samples']}")


def write_manifest(root: Path, manifest: dict) -> None:
    """Atomically replace the manifest (this is what makes a write or update visible)."""
    data = json.dumps(manifest, indent=1, sort_keys=False).encode() + b"\n"
    atomic_write_bytes(Path(root) / MANIFEST, data)
    fsync_dir(Path(root))


def manifest_fingerprint(manifest: dict) -> str:
    """Stable hash of what the data is: sample counts and every file's checksum."""
    algo = manifest.get("checksum", CHECKSUM)
    parts = [algo, str(manifest["num_samples"])]
    for shard in manifest["shards"]:
        parts.append(f"{shard['name']}:{shard['num_samples']}")
        for fname in sorted(shard["files"]):
            parts.append(f"{fname}={shard['files'][fname].get(algo)}")
    return xxhash.xxh3_64_hexdigest("\n".join(parts).encode())
