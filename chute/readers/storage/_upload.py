"""Writing a dataset to object storage (docs/storage.md, "Writing to s3://").

Shards are written to a local staging folder and uploaded as each one is finished (then
removed locally, so a convert needs local room for about one shard), under names unique to
this write (`w<token>-00000`): the shards of the dataset already there are never touched
before the end. The manifest is uploaded last, which is what makes the new dataset visible
in one step; only then are the old version's objects and the leftovers of interrupted writes
deleted. A write that is interrupted leaves the old dataset (or none) whole. A write holds
the destination's lease (`_write_lease.py`) from start to end: a second writer to the same URL
fails at once, and one whose lease was taken over, or whose dataset was replaced meanwhile,
fails at the manifest, leaving the other writer's dataset whole."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from chute.errors import ChuteError
from chute.readers.storage._object_store import Remote, StorageError
from chute.readers.storage._write_lease import LEASE, WriteLease

__all__ = ["RemoteDestination"]

_MANIFEST = "chute.json"  # readers/format/_manifest.py's MANIFEST (storage sits below format)
_OWN = re.compile(r"^w[0-9a-f]{8}-\d{5}/")  # a shard of some write, finished or interrupted
_REPORTS = ("skipped.tsv",)  # written beside the manifest by converters


class RemoteDestination:
    """The destination `url` of one dataset write.

    Args:
        url: `s3://bucket/prefix`.
        overwrite: replace a chute dataset that is there (else it is an error).
    """

    def __init__(self, url: str, overwrite: bool):
        self.remote = Remote(url)
        self.url = self.remote.url
        self.token = secrets.token_hex(4)
        self._lease: WriteLease | None = WriteLease(self.remote, self.token, _MANIFEST)
        try:
            self._check(overwrite)
        except BaseException:
            self._lease.release()
            raise
        self.staging = Path(tempfile.mkdtemp(prefix="chute-upload-"))
        self._uploaded: list[str] = []

    def _check(self, overwrite: bool) -> None:
        existing = dict(self.remote.list())
        self._old: dict | None = None
        if _MANIFEST in existing:
            if not overwrite:
                raise ChuteError(f"{self.url}: already holds a chute dataset; pass "
                                 "overwrite=True (--overwrite) to replace it")
            try:
                self._old = json.loads(self.remote.get_bytes(_MANIFEST))
            except ValueError:
                self._old = None  # a damaged manifest: its objects go with the leftovers
        foreign = sorted(n for n in existing
                         if n not in (_MANIFEST, LEASE) and not _OWN.match(n)
                         and n not in _REPORTS and not self._listed_in_old(n))
        if foreign:
            raise ChuteError(f"{self.url}: already holds {len(foreign)} objects that are not a "
                             f"chute dataset (e.g. {foreign[0]}); choose an empty prefix")

    @classmethod
    def part(cls, url: str) -> RemoteDestination:
        """The uploader of one task of a distributed write to `url`: its shards only (the
        writer that commits checked the destination and uploads the manifest)."""
        self = cls.__new__(cls)
        self.remote = Remote(url)
        self.url = self.remote.url
        self.token = secrets.token_hex(4)
        self._old = None
        self._lease = None  # the writer that commits holds the destination's lease
        self.staging = Path(tempfile.mkdtemp(prefix="chute-upload-"))
        self._uploaded = []
        return self

    def check(self) -> None:
        """Raise when this write may not go on (its lease was lost to another writer)."""
        if self._lease is not None:
            self._lease.check()

    def finish(self) -> None:
        """A task's shards are all uploaded: remove its local staging folder."""
        shutil.rmtree(self.staging, ignore_errors=True)

    def _listed_in_old(self, name: str) -> bool:
        if not self._old:
            return False
        return name in _names_of(self._old)

    def shard_name(self, index: int) -> str:
        """The name of shard `index` of this write."""
        return f"w{self.token}-{index:05d}"

    def upload_folder(self, folder: Path) -> None:
        """Upload the finished shard `folder` (named by `shard_name`), then remove it here."""
        if self._lease is not None:
            self._lease.check()
        for path in sorted(folder.iterdir()):
            name = f"{folder.name}/{path.name}"
            self.remote.put_file(name, path)
            self._uploaded.append(name)
        shutil.rmtree(folder, ignore_errors=True)

    def upload_file(self, path: Path, name: str) -> None:
        """Upload a file stored once per dataset (a table)."""
        if self._lease is not None:
            self._lease.check()
        self.remote.put_file(name, path)
        self._uploaded.append(name)

    def publish(self, manifest_path: Path) -> None:
        """Upload the manifest (the new dataset is visible from here on), then delete what
        no longer belongs: the old version's objects and interrupted writes' shards."""
        new = json.loads(manifest_path.read_text())
        assert self._lease is not None
        self._lease.put_manifest(_MANIFEST, manifest_path.read_bytes())
        keep = _names_of(new) | {_MANIFEST, *_REPORTS}
        try:
            stale = [n for n, _ in self.remote.list() if n not in keep and
                     (_OWN.match(n) or (self._old is not None and n in _names_of(self._old)))]
            self.remote.delete(stale)
        except StorageError:
            pass  # the new dataset is complete; leftovers go at the next write
        self._lease.release()
        shutil.rmtree(self.staging, ignore_errors=True)

    def abort(self) -> None:
        """Remove this write's objects, and while it holds the lease every other write's
        leftovers too (the parts of a distributed write's tasks); best effort: the next write
        removes any left."""
        shutil.rmtree(self.staging, ignore_errors=True)
        names = list(self._uploaded)
        lease = self._lease
        if lease is not None and lease.lost is not None:  # tables share the other's names
            names = [n for n in names if n.startswith(f"w{self.token}-")]
        elif lease is not None:
            old = _names_of(self._old) if self._old else set()
            try:
                names += [n for n, _ in self.remote.list() if _OWN.match(n) and n not in old]
            except StorageError:
                pass
        try:  # before the lease goes: a writer after us may write shards of its own
            self.remote.delete(sorted(set(names)))
        except StorageError:
            pass
        if lease is not None:
            lease.release()


def _names_of(manifest: dict) -> set[str]:
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
