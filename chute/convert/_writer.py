"""ShardWriter: append samples to a new chute v1 dataset, shard by shard, atomically."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chute.convert.destination._dest_lock import DestinationLock
from chute.convert.destination._publish import clean_leftovers, publish, staging_folder
from chute.convert.destination._upload import RemoteDestination
from chute.errors import ChuteError
from chute.readers import parse_size
from chute.readers.format import FORMAT, MANIFEST, VERSION, write_manifest
from chute.readers.kinds import (
    Encoded,
    declare,
    field_files,
    field_stem,
    get_kind,
    infer_declaration,
    table_array,
    write_table,
)
from chute.readers.storage import CHECKSUM, fsync_dir, is_disk_full, is_remote, local_path, no_space

__all__ = ["ShardWriter", "PartTarget", "PartWriter", "infer_fields"]


@dataclass(frozen=True)
class PartTarget:
    """Where the part writers of one distributed write put their shards (picklable): the
    writing ShardWriter's staging folder (a local or shared file system) or its s3:// URL."""

    location: str
    remote: bool
    shard_size: int
    fields: dict | None  # the declarations (completed by each part's first sample)


def infer_fields(sample: dict) -> dict[str, dict]:
    """Field declarations from one sample: each value goes to the first kind that stores it
    (uint8 arrays and bytes-like -> "bytes", other numeric arrays -> "ndarray", numbers -> a
    scalar column of their NumPy dtype, anything else -> "json")."""
    return {name: infer_declaration(value) for name, value in sample.items()}


def _checked(fields: dict[str, dict]) -> dict[str, dict]:
    """Field names that make safe file names, and no two fields writing the same file."""
    owner: dict[str, str] = {}
    for name, spec in fields.items():
        if not isinstance(name, str) or not name or name.startswith(".") or \
                any(c in name for c in "/\\\0"):
            raise ValueError(f"field name {name!r} cannot name files: use letters, digits, "
                             "'_', '-' or '.' (not first)")
        for fname in field_files(name, spec):
            if fname in owner:
                raise ValueError(f"fields {owner[fname]!r} and {name!r} would both write "
                                 f"{fname}; rename one of them")
            owner[fname] = name
    return fields


class _Shard:
    """The files of the shard being written: one column writer per field, from its kind."""

    def __init__(self, folder: Path, fields: dict[str, dict]):
        folder.mkdir()
        self.folder = folder
        self.columns = {}
        try:
            for name, spec in fields.items():
                self.columns[name] = get_kind(spec["kind"]).writer(
                    folder, field_stem(name, spec), spec)
        except BaseException:
            self.abort()
            raise
        self.count = 0
        self.payload = 0

    def add(self, encoded: dict[str, Encoded]) -> None:
        for name, value in encoded.items():
            self.columns[name].add(value)
            self.payload += value.payload
        self.count += 1

    def commit(self) -> dict:
        files = {}
        for column in self.columns.values():
            files.update(column.commit())
        fsync_dir(self.folder)
        return {"name": self.folder.name, "num_samples": self.count,
                "files": dict(sorted(files.items()))}

    def abort(self) -> None:
        for column in self.columns.values():
            column.abort()


class ShardWriter:
    """Write a chute v1 dataset::

        with ShardWriter("train.chute", {"image": "bytes", "label": "int64",
                                         "latent": "ndarray", "height": "int32",
                                         "width": "int32", "meta": "json"}) as w:
            w.write({"image": jpeg_bytes, "label": 3, "latent": z, "height": 375,
                     "width": 500, "meta": {"key": "n01440764/x.JPEG"}})

    The dataset is written into a private folder beside `path` (every file fsynced, the
    manifest last) and renamed into place at `close`, under an exclusive lock on `path`: an
    interrupted write leaves `path` as it was (no dataset, or the old one when overwriting),
    and a second writer to the same `path` gets a ChuteError instead of mixing files.

    Args:
        path: the dataset folder to create (must be new or empty), or `s3://bucket/prefix`
            (shards uploaded as they are finished, the manifest last: docs/storage.md).
        fields: field name -> declaration: a kind name ("bytes", "json", "ndarray"), a NumPy
            dtype for a scalar column ("int64"), or a dict with "kind" and the kind's options
            (ndarray: "dtype", "shape", "ragged", "compression" = None | "zstd", "level").
            What a declaration leaves open (an ndarray's dtype and shape) is taken from the
            first sample; later samples must match. None infers every field from the first
            sample.
        shard_size: a new shard starts when the payload fields of the current one would
            exceed this ("1GiB", "64MB", or an int).
        class_names: label names stored in the manifest.
        manifest_extra: more keys for the manifest (may be changed until `close`).
        overwrite: replace an existing chute dataset at `path` (swapped at `close`).
        tables: field name -> array stored once for the whole dataset (kind `table`),
            delivered per sample through an index field (`fields={table: Lookup(index)}`).
    """

    def __init__(self, path: str | Path, fields: Mapping[str, str | dict] | None = None, *,
                 shard_size: str | int = "1GiB", class_names: list[str] | None = None,
                 manifest_extra: dict | None = None, overwrite: bool = False,
                 tables: dict | None = None):
        self._remote = RemoteDestination(str(path), overwrite) if is_remote(path) else None
        # s3://... must not become a folder "s3:"
        self.path: Path | str = self._remote.url if self._remote else \
            local_path(path, writing=True)
        self._start(None if fields is None else
                    _checked({n: declare(n, d) for n, d in fields.items()}),
                    parse_size(shard_size))
        # keys added to the manifest at close (may be changed until then)
        self.manifest_extra = {"class_names": class_names, **(manifest_extra or {})}
        # checked now: a bad table must fail before anything is written
        self._tables = {n: table_array(n, v) for n, v in (tables or {}).items()}
        both = sorted(set(self._tables) & set(self._declared or {}))
        if both:
            raise ValueError(f"{both} are both fields and tables; rename one")
        self._lock: DestinationLock | None
        if self._remote is not None:  # shards uploaded as they are finished, manifest last
            self._folder = self._remote.staging
            self._lock = None
            return
        # Written into a private folder beside the destination under its lock, then renamed
        # into place: a concurrent writer gets an error, a killed one leaves the old dataset.
        local = Path(self.path)
        self._dest = local.resolve() if local.is_symlink() else local
        lock = self._lock = DestinationLock(self._dest, purpose="writing a dataset (ShardWriter)")
        try:
            clean_leftovers(self._dest)
            self._replace = self._check_destination(overwrite)
            self._folder = staging_folder(self._dest)
        except BaseException:
            lock.release()
            raise

    def _start(self, declared: dict[str, dict] | None, shard_size: int) -> None:
        """The state of a write that holds no sample yet."""
        self.shard_size = shard_size
        self._declared = declared
        self._fields: dict[str, dict] | None = None  # complete specs, after the first sample
        self._shards: list[dict] = []
        self._current: _Shard | None = None
        self._count = 0
        self._closed = False
        self._adopted = False  # parts of a distributed write were adopted

    def _check_destination(self, overwrite: bool) -> bool:
        """True when an existing dataset is to be replaced; ChuteError when the destination
        holds anything else."""
        if not os.path.lexists(self._dest):
            return False
        entries = list(self._dest.iterdir()) if self._dest.is_dir() else [self._dest]
        if (self._dest / MANIFEST).exists() and overwrite:
            return True
        if entries:
            hint = ("pass overwrite=True (--overwrite) to replace it"
                    if (self._dest / MANIFEST).exists() else "choose an empty or new folder")
            raise ChuteError(f"{self.path}: already exists and is not empty; {hint}")
        return False

    def __len__(self) -> int:
        return self._count

    def write(self, sample: dict) -> int:
        """Append one sample (field name -> value); returns its global id."""
        if self._closed:
            raise ChuteError(f"{self.path}: writer is closed")
        fields = self._fields or self._complete(sample)
        encoded = self._encode(fields, sample)
        size = sum(e.payload for e in encoded.values())
        shard = self._current
        try:
            if shard is not None and shard.count and shard.payload + size > self.shard_size:
                self._commit_shard(shard)
                shard = None
            if shard is None:
                name = self._shard_name(len(self._shards))
                shard = self._current = _Shard(self._folder / name, fields)
            shard.add(encoded)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            # a record or a shard half written: nothing of this dataset can be kept
            self.abort()
            raise no_space(self.path, f"sample {self._count}") from None
        self._fields = fields
        self._count += 1
        return self._count - 1

    def _shard_name(self, index: int) -> str:
        return self._remote.shard_name(index) if self._remote else f"{index:05d}"

    def part_target(self) -> PartTarget:
        """Where other processes or machines write parts of this dataset (`PartWriter`),
        which `adopt` then takes in order: a distributed write (docs/ray.md)."""
        if self._remote is not None:
            return PartTarget(self._remote.url, True, self.shard_size, self._declared)
        return PartTarget(str(self._folder), False, self.shard_size, self._declared)

    def check(self) -> None:
        """Raise when this write can no longer be committed (an s3 destination's lease was
        lost to another writer): an engine waiting on its tasks stops early."""
        if self._remote is not None:
            self._remote.check()

    def adopt(self, part: dict) -> None:
        """Append the shards a `PartWriter` wrote (its `part`), after those written or adopted
        before. Shards of the same target that are never adopted (a failed or retried task's)
        are removed at `close`.

        Args:
            part: `PartWriter.part` of a finished part writer of this writer's `part_target`.
        """
        if self._current is not None:
            raise ChuteError(f"{self.path}: adopt() after write(): finish one way of writing")
        fields = part["fields"]
        self._adopted = True  # also for an empty part: the staging folder is swept at close
        if part["num_samples"] == 0:
            return
        if self._fields is not None and fields != self._fields:
            raise ValueError(f"{self.path}: a part has fields {fields}, the dataset "
                             f"{self._fields}; every part needs the same fields and specs")
        self._fields = fields
        for shard in part["shards"]:
            name = shard["name"]
            if self._remote is None:  # named in order, as a single writer names them
                name = self._shard_name(len(self._shards))
                try:
                    os.rename(self._folder / shard["name"], self._folder / name)
                except FileNotFoundError:
                    raise ChuteError(
                        f"{self.path}: shard {shard['name']} of a part is not in "
                        f"{self._folder}; parts written on other machines need a destination "
                        "every machine sees (a shared file system, or s3://, gs://, az://)") \
                        from None
            self._shards.append({**shard, "name": name})
        self._count += part["num_samples"]

    def _commit_shard(self, shard: _Shard) -> None:
        self._current = None
        self._shards.append(shard.commit())
        if self._remote is not None:
            self._remote.upload_folder(shard.folder)

    def _complete(self, sample: dict) -> dict[str, dict]:
        declared = self._declared
        if declared is None:
            declared = _checked({n: declare(n, d) for n, d in infer_fields(sample).items()})
        self._check_names(declared, sample)
        return {n: get_kind(s["kind"]).complete(n, s, sample[n]) for n, s in declared.items()}

    def _check_names(self, fields: dict, sample: dict) -> None:
        if sample.keys() != fields.keys():
            raise ValueError(f"sample {self._count} has fields {sorted(sample)}, the dataset "
                             f"has {sorted(fields)}; every sample needs the same fields")

    def _encode(self, fields: dict[str, dict], sample: dict) -> dict[str, Encoded]:
        # Every field is validated before anything is written: a bad sample leaves no trace.
        self._check_names(fields, sample)
        return {name: get_kind(spec["kind"]).encode(name, spec, sample[name], self._count)
                for name, spec in fields.items()}

    def close(self) -> None:
        """Finish the last shard and write the manifest (makes the dataset visible)."""
        if self._closed:
            return
        try:
            self._finish()
        except BaseException as exc:
            self.abort()  # a half-written folder would block a retry
            if is_disk_full(exc) and not isinstance(exc, ChuteError):
                raise no_space(self.path, "its last shard and manifest") from None
            raise
        self._closed = True

    def _finish(self) -> None:
        fields = self._fields or self._declared or {}
        for name, spec in fields.items():
            problem = get_kind(spec["kind"]).check(name, spec)
            if problem:  # only a declaration no sample completed can be incomplete here
                raise ValueError(f"{self.path}: {problem}; with no samples written, declare "
                                 "the field fully (e.g. an ndarray's dtype and shape)")
        if self._current is not None:
            self._commit_shard(self._current)
        fields = dict(self._fields or self._declared or {})
        for name, values in self._tables.items():
            fields[name] = write_table(self._folder, name, values)
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "checksum": CHECKSUM,
            "num_samples": self._count,
            "fields": fields,
            **self.manifest_extra,
            "shards": self._shards,
        }
        if self._adopted and self._remote is None:
            keep = {s["name"] for s in self._shards} | \
                {spec["file"] for spec in fields.values() if "file" in spec}
            for entry in os.scandir(self._folder):  # parts never adopted (failed attempts)
                if entry.name not in keep:
                    shutil.rmtree(entry.path, ignore_errors=True)
        write_manifest(self._folder, manifest)
        if self._remote is not None:
            for spec in fields.values():
                if "file" in spec and CHECKSUM in spec:  # a table, stored once
                    self._remote.upload_file(self._folder / spec["file"], spec["file"])
            self._remote.publish(self._folder / MANIFEST)
            return
        publish(self._folder, self._dest, self._replace)
        assert self._lock is not None
        self._lock.release()

    def abort(self) -> None:
        """Drop everything written so far (an existing dataset at `path` stays as it was)."""
        if self._closed:
            return
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            current.abort()
        if self._remote is not None:
            self._remote.abort()
            return
        self._drop_local(current)

    def _drop_local(self, current: _Shard | None) -> None:
        """Remove what this writer wrote locally (its staging folder) and let the lock go."""
        shutil.rmtree(self._folder, ignore_errors=True)
        assert self._lock is not None
        self._lock.release()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class PartWriter(ShardWriter):
    """One task's share of a distributed write: shards written beside the other tasks' under
    names unique to this attempt, no manifest. `part` (after `close`) is what the writing
    ShardWriter's `adopt` takes; a task that fails or is retried leaves only shards nobody
    adopts, which the commit removes (docs/ray.md).

    Args:
        target: `ShardWriter.part_target()` of the writer that commits the dataset.
        fields: field name -> declaration (as `ShardWriter` takes them), for a target that
            declares none: a task that knows its samples better than inference does (every
            part must come out with the same fields and specs).
    """

    def __init__(self, target: PartTarget, fields: Mapping[str, str | dict] | None = None):
        self._attempt = secrets.token_hex(4)
        self._remote = RemoteDestination.part(target.location) if target.remote else None
        self.path = target.location
        declared = target.fields
        if declared is None and fields is not None:
            declared = _checked({n: declare(n, d) for n, d in fields.items()})
        self._start(declared, target.shard_size)
        self.manifest_extra = {}
        self._tables = {}
        self._lock = None
        self._folder = self._remote.staging if self._remote else Path(target.location)
        self.part: dict | None = None

    def _shard_name(self, index: int) -> str:
        if self._remote is not None:
            return self._remote.shard_name(index)
        return f"p{self._attempt}-{index:05d}"

    def _finish(self) -> None:
        if self._current is not None:
            self._commit_shard(self._current)
        self.part = {"shards": self._shards, "num_samples": self._count,
                     "fields": self._fields or self._declared or {}}
        if self._remote is not None:
            self._remote.finish()

    def _drop_local(self, current: _Shard | None) -> None:
        """Remove this part's shards only (the staging folder is the committing writer's)."""
        for shard in self._shards:
            shutil.rmtree(self._folder / shard["name"], ignore_errors=True)
        if current is not None:
            shutil.rmtree(current.folder, ignore_errors=True)
