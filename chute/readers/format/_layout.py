"""Where a dataset's files are: a chute v1 directory, or a bare Megatron-LM `.bin/.idx` pair."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import xxhash

from chute.errors import FormatError
from chute.readers.format._manifest import MANIFEST, load_manifest, manifest_fingerprint
from chute.readers.format._mmidx import read_index
from chute.readers.kinds._kinds import field_files, field_stem
from chute.readers.storage._files import CHECKSUM
from chute.readers.storage._paths import Confined

__all__ = ["Layout", "resolve_layout", "listed_files"]


@dataclass
class Layout:
    root: Path  # dataset folder, or the Megatron prefix
    manifest: dict
    fingerprint: str
    folders: list[Path]  # one per shard, in order
    stems: dict[str, str]  # field -> stem of its files inside every shard folder
    expected_sizes: dict[Path, int]  # empty for Megatron pairs (no manifest)
    trailing_index_ok: bool  # Megatron-LM may append sequence modes after the doc indices


def resolve_layout(path, bytes_field: str) -> Layout:
    path = Path(path)
    if path.is_dir():
        return _chute_layout(path)
    if path.name == MANIFEST and path.is_file():
        return _chute_layout(path.parent)
    prefix = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    if bin_path.is_file() or idx_path.is_file():
        return _megatron_layout(prefix, bin_path, idx_path, bytes_field)
    raise FormatError(f"{path}: no such dataset (expected a chute folder with {MANIFEST}, "
                      "or a PREFIX with PREFIX.bin + PREFIX.idx)")


def listed_files(root: Path, manifest: dict) -> list[tuple[Path, dict]]:
    """(path, manifest entry with size and checksum) of every file the manifest lists: the
    files of every shard, then the files stored once per dataset (tables). Each path is checked
    to stay inside `root` (`readers/storage/_paths.py`)."""
    folder = Confined(root)  # resolved once, not once per file
    files = []
    for shard in manifest["shards"]:
        shard_folder = folder.check(root / shard["name"], "shard folder")
        files += [(folder.check(shard_folder / fname, f"file of shard {shard['name']}"), entry)
                  for fname, entry in shard["files"].items()]
    # files stored once per dataset (tables) carry their own entry in their field's spec
    files += [(folder.check(root / spec["file"], f"file of field {name!r}"), spec)
              for name, spec in manifest["fields"].items()
              if CHECKSUM in spec and "file" in spec]
    return files


def _chute_layout(root: Path) -> Layout:
    manifest = load_manifest(root)
    fields = manifest["fields"]
    for shard in manifest["shards"]:
        for name, spec in fields.items():
            for f in field_files(name, spec):
                if f not in shard["files"]:
                    raise FormatError(f"{root / MANIFEST}: shard {shard['name']} does not list "
                                      f"{f}; the manifest is corrupt")
    sizes = {path: entry["size"] for path, entry in listed_files(root, manifest)}
    folders = [root / shard["name"] for shard in manifest["shards"]]
    stems = {name: field_stem(name, spec) for name, spec in fields.items()}
    return Layout(root, manifest, manifest_fingerprint(manifest), folders, stems, sizes, False)


def _megatron_layout(prefix: Path, bin_path: Path, idx_path: Path, field: str) -> Layout:
    for p in (bin_path, idx_path):
        if not p.is_file():
            raise FormatError(f"{p}: missing; a Megatron-LM dataset needs both "
                              f"{bin_path.name} and {idx_path.name}")
    index = read_index(idx_path, trailing_ok=True)
    n = len(index.lengths)
    manifest = {
        "format": "megatron-mmidx",
        "num_samples": n,
        "fields": {field: {"kind": "bytes", "dtype": index.dtype.name}},
        "class_names": None,
        "shards": [{"name": prefix.name, "num_samples": n, "files": {}}],
    }
    # No checksums exist; identify the data by its index, size and modification time.
    stat = os.stat(bin_path)
    hasher = xxhash.xxh3_64(idx_path.read_bytes())
    hasher.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return Layout(prefix, manifest, hasher.hexdigest(), [prefix.parent], {field: prefix.name},
                  {}, True)
