"""Inspecting a dataset: sizes and overhead (`chute info`), full checksum verification
(`chute verify`)."""

from __future__ import annotations

import errno
import warnings
from pathlib import Path
from stat import S_ISREG

from tqdm import tqdm

from chute.errors import FormatError
from chute.readers._open import open_dataset
from chute.readers._remote import verify_remote
from chute.readers.format._layout import listed_files
from chute.readers.format._manifest import (
    MANIFEST,
    MANIFEST_CHECKSUM,
    load_manifest,
    manifest_checksum,
)
from chute.readers.kinds._kinds import KINDS, field_files
from chute.readers.storage._files import CHECKSUM, file_checksum
from chute.readers.storage._object_store import is_remote
from chute.readers.zarr._inspect_zarr import verify_zarr, zarr_info
from chute.readers.zarr._zarr import ZarrDataset, is_zarr_group

__all__ = ["dataset_info", "verify_dataset", "verify_kind"]

# stat errors that mean "no such file" (those Path.exists answers False to)
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _file_roles(manifest: dict) -> dict[str, str]:
    """File name inside a shard -> payload | index | columns | metadata (from each kind)."""
    roles = {}
    for name, spec in manifest["fields"].items():
        roles.update(field_files(name, spec))
    return roles


def dataset_info(path, *, sample_array: str | None = None) -> dict:
    """Samples, fields (kind, and each kind's description in `field_types`), shards and bytes
    by role. overhead_pct = (index + columns) / payload.

    Args:
        path: the dataset (or zarr group, or Megatron prefix).
        sample_array: for a zarr group whose arrays' first dimensions differ: the array whose
            rows are the samples.
    """
    ds = open_dataset(path) if sample_array is None else \
        open_dataset(path, sample_array=sample_array)
    if isinstance(ds, ZarrDataset):
        return zarr_info(ds)
    manifest = ds.manifest
    totals = {"payload": 0, "index": 0, "columns": 0, "metadata": 0}
    if manifest["format"] == "chute":
        roles = _file_roles(manifest)
        for shard in manifest["shards"]:
            for fname, entry in shard["files"].items():
                totals[roles.get(fname, "metadata")] += entry["size"]
        totals["manifest"] = (Path(ds.path) / MANIFEST).stat().st_size
    else:  # a Megatron pair: sizes from the files themselves
        totals["payload"] = Path(f"{ds.path}.bin").stat().st_size
        totals["index"] = Path(f"{ds.path}.idx").stat().st_size
    payload = totals["payload"]
    return {
        "path": ds.url if is_remote(ds.url) else str(ds.path),
        "format": manifest["format"],
        "samples": len(ds),
        "fields": ds.fields,
        "field_types": {name: KINDS[spec["kind"]].describe(spec)
                        for name, spec in ds.specs.items()},
        "shards": len(manifest["shards"]),
        "class_names": len(ds.class_names) if ds.class_names else 0,
        "bytes": {**totals, "total": sum(totals.values())},
        "overhead_pct": 100.0 * (totals["index"] + totals["columns"]) / payload if payload else 0.0,
        "metadata_pct": 100.0 * totals["metadata"] / payload if payload else 0.0,
        "fingerprint": ds.fingerprint,
        "source": manifest.get("source"),
    }


def verify_kind(path) -> str:
    """What `verify_dataset` checks at `path`: "remote" or "chute" (every file's checksum),
    "zarr" (every chunk decodes) or "megatron" (the structure of a .bin/.idx pair).

    Args:
        path: the dataset (or zarr group, or Megatron prefix).
    """
    if is_remote(path):
        return "remote"
    root = Path(path)
    if root.name == MANIFEST:
        root = root.parent
    if is_zarr_group(root):
        return "zarr"
    return "chute" if (root / MANIFEST).exists() or root.is_dir() else "megatron"


def verify_dataset(path, *, progress: bool = False,
                   missing_chunks: str | dict[str, str] = "error") -> list[str]:
    """Check every file's size and checksum against the manifest, then the structure (index
    magic, counts, bounds). Returns the problems found, each naming its file; [] means OK.

    Args:
        path: the dataset (or zarr group, or Megatron prefix).
        progress: show a progress bar.
        missing_chunks: for a zarr group: "error" reports absent chunk files as problems;
            "fill" (or {array: "fill"}) accepts them as fill values, as reading would.
    """
    kind = verify_kind(path)
    if kind == "remote":
        return verify_remote(str(path), progress=progress)
    root = Path(path)
    if root.name == MANIFEST:
        root = root.parent
    if kind == "zarr":
        return verify_zarr(ZarrDataset(root, missing_chunks=missing_chunks, _need_samples=False),
                           progress=progress)
    if kind == "megatron":
        open_dataset(path)  # a Megatron pair has no checksums: structural checks only
        return []
    manifest = load_manifest(root)
    algo = manifest.get("checksum", CHECKSUM)
    if algo != CHECKSUM:
        raise FormatError(f"{root / MANIFEST}: checksum {algo!r} is not supported ({CHECKSUM})")
    files = listed_files(root, manifest)
    problems = []
    own = manifest.get(MANIFEST_CHECKSUM)
    if own is None:
        warnings.warn(f"{root / MANIFEST}: the manifest has no checksum of its own (written "
                      "before chute added one), so edits to it cannot be detected; any chute "
                      "write or `chute meta update` adds it", stacklevel=2)
    elif own != manifest_checksum(manifest):
        problems.append(f"{root / MANIFEST}: the manifest's own checksum does not match its "
                        "content (it was edited by hand or corrupted: a dtype, shape or shard "
                        "may read other data); restore it")
    bar = tqdm(total=sum(e["size"] for _, e in files), unit="B", unit_scale=True,
               disable=not progress, desc="verify")
    for file, entry in files:
        bar.update(entry["size"])
        try:
            info = file.stat()  # once per file
        except OSError as exc:
            if exc.errno not in _MISSING:
                raise
            info = None
        if info is None:
            problems.append(f"{file}: missing")
        elif not S_ISREG(info.st_mode):
            problems.append(f"{file}: not a regular file")
        elif info.st_size != entry["size"]:
            problems.append(f"{file}: size {info.st_size}, manifest says {entry['size']}")
        elif file_checksum(file) != entry.get(algo):
            problems.append(f"{file}: checksum mismatch (the file was modified or corrupted)")
    bar.close()
    if not problems:
        try:
            open_dataset(root)
        except FormatError as exc:
            problems.append(str(exc))
    return problems
