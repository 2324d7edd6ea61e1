"""The dataset manifest `chute.json`: fields and kinds, shards, per-file sizes and checksums.

{
  "format": "chute", "version": 1, "checksum": "xxh3_64",
  "num_samples": N,
  "fields": {"image": {"kind": "bytes"}, "label": {"kind": "scalar", "dtype": "int64"},
             "meta": {"kind": "json", "file": "meta"}},
  "shards": [{"name": "00000", "num_samples": n,
              "files": {"image.bin": {"size": S, "xxh3_64": "..."}, ...}}],
  "class_names": [...] | null,
  "manifest_xxh3_64": "..."   (of everything else; absent in manifests written before it)
}
Which files a field has in every shard folder is its kind's business
(`readers/kinds/_kinds.py`); their stem is `file`, which defaults to the field name (metadata
updates write a new generation).
"""

from __future__ import annotations

import json
from pathlib import Path

import xxhash

from chute.errors import FormatError
from chute.readers.format._manifest_check import FORMAT, VERSION, check_manifest
from chute.readers.storage._files import CHECKSUM, atomic_write_bytes, fsync_dir

__all__ = ["MANIFEST", "MANIFEST_CHECKSUM", "FORMAT", "VERSION", "load_manifest",
           "write_manifest", "manifest_checksum", "manifest_fingerprint"]

MANIFEST = "chute.json"
# the manifest's checksum of itself (`manifest_checksum`); manifests written before it have none
MANIFEST_CHECKSUM = "manifest_xxh3_64"


def load_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        if (Path(root) / ".zarray").is_file():  # a zarr v2 array (v3's is refused when opened)
            from chute.readers.zarr._zarr import array_not_group

            raise array_not_group(root) from None
        raise FormatError(f"{root}: not a chute dataset (no {MANIFEST}); create one with "
                          "`chute convert`, or the conversion was interrupted") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: manifest is not valid JSON ({exc}); restore it") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (int's conversion limit)
        raise FormatError(f"{path}: manifest holds a value chute cannot read ({exc}); restore "
                          "it") from None
    except RecursionError:
        raise FormatError(f"{path}: manifest is nested too deeply to be a chute manifest; "
                          "restore it") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the manifest ({exc.strerror or exc})") from None
    check_manifest(path, manifest)
    return manifest


def manifest_checksum(manifest: dict) -> str:
    """xxh3-64 of the manifest's content without its own checksum (MANIFEST_CHECKSUM), in a
    canonical form (sorted keys, no spaces), so that `chute verify` notices a manifest edited
    by hand (a dtype, a shape, the shard order) the way it notices an edited data file."""
    content = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    return xxhash.xxh3_64_hexdigest(json.dumps(content, sort_keys=True, separators=(",", ":"),
                                               default=str).encode())


def write_manifest(root: Path, manifest: dict) -> None:
    """Atomically replace the manifest (this is what makes a write or update visible), with
    its own checksum (MANIFEST_CHECKSUM) added."""
    manifest = {**{k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM},
                MANIFEST_CHECKSUM: manifest_checksum(manifest)}
    data = json.dumps(manifest, indent=1, sort_keys=False).encode() + b"\n"
    atomic_write_bytes(Path(root) / MANIFEST, data)
    fsync_dir(Path(root))


def manifest_fingerprint(manifest: dict, *, specs: bool = True, whole: bool = True) -> str:
    """Stable hash of what the data is: sample counts, every file's checksum and every field's
    spec (its kind, dtype, shape, media; a table's checksum), so a manifest edited to read the
    same bytes as another dtype or shape, or a replaced table, is another dataset.

    Args:
        manifest: the parsed manifest.
        specs: False gives the round-2 fingerprint (files only), which resume states saved
            before round 3 hold.
        whole: with `specs`, cover everything else the manifest says too (class names, file
            sizes, any other key: its `manifest_checksum`), so a manifest damaged in flight
            is never another version's (issue 37 item 5); False gives the fingerprint that
            resume states saved before it hold.
    """
    algo = manifest.get("checksum", CHECKSUM)
    parts = [algo, str(manifest["num_samples"])]
    for shard in manifest["shards"]:
        parts.append(f"{shard['name']}:{shard['num_samples']}")
        for fname in sorted(shard["files"]):
            parts.append(f"{fname}={shard['files'][fname].get(algo)}")
    if specs:
        parts.append(json.dumps(manifest.get("fields", {}), sort_keys=True, default=str))
        if whole:
            parts.append(manifest_checksum(manifest))
    return xxhash.xxh3_64_hexdigest("\n".join(parts).encode())
