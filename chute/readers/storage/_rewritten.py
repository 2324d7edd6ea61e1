"""A file of a dataset in object storage that is gone while a process reads that version: a
rewrite deletes the old version's objects once the new manifest is up (docs/storage.md,
"Writing to s3://"), so a reader still on the old version is told in one line that the
dataset was rewritten and to reopen it, not to check the URL."""

from __future__ import annotations

import json
from pathlib import Path

from chute.readers.storage._object_store import Remote, StorageError, UnreachableError

__all__ = ["download_listed", "listed_objects"]

_MANIFEST = "chute.json"  # readers/format/_manifest.py's MANIFEST (storage sits below format)


def download_listed(remote: Remote, name: str, dest: Path, size: int, checksum: str | None,
                    *, temp: Path) -> None:
    """`remote.download` of object `name`, which the manifest this process read lists; when
    it is gone because the dataset was rewritten or deleted since, a StorageError saying so.

    Args:
        remote: the dataset's folder.
        name: the object.
        dest: where it goes.
        size: the manifest's size.
        checksum: the manifest's checksum.
        temp: the temporary file it is written to first.
    """
    try:
        remote.download(name, dest, size, checksum, temp=temp)
    except UnreachableError:
        raise  # asking the endpoint again would only wait as long once more
    except StorageError:
        why = _replaced(remote, name)
        if why is None:
            raise
        raise StorageError(
            f"{remote.where(name)}: the dataset {remote.url} was {why} while this process "
            "read it (the objects of the version it opened are deleted); reopen it "
            "(open_dataset, or restart the job) to read what is there now") from None


def _replaced(remote: Remote, name: str) -> str | None:
    """"rewritten" or "deleted" when object `name` is gone and the dataset's manifest no
    longer lists it; None when it is there, still listed, or that cannot be told."""
    try:
        if remote.head(name) is not None:
            return None
        if remote.head(_MANIFEST) is None:
            return "deleted"
        manifest = json.loads(remote.get_bytes(_MANIFEST))
    except (StorageError, ValueError):
        return None
    return None if name in listed_objects(manifest) else "rewritten"


def listed_objects(manifest: dict) -> set[str]:
    """Every object a manifest lists (shard files and tables)."""
    names: set[str] = set()
    try:
        for shard in manifest.get("shards", []):
            names.update(f"{shard['name']}/{f}" for f in shard.get("files", {}))
        for spec in manifest.get("fields", {}).values():
            if isinstance(spec, dict) and "file" in spec and "xxh3_64" in spec:  # a table
                names.add(spec["file"])
    except (TypeError, KeyError, AttributeError):
        pass
    return names
