"""Writing a dataset to object storage (docs/storage.md, "Writing to s3://").

Shards are written to a local staging folder and uploaded as each one is finished (then
removed locally, so a convert needs local room for about one shard), under names unique to
this write (`w<token>-00000`): the shards of the dataset already there are never touched
before the end. The manifest is uploaded last, which is what makes the new dataset visible
in one step; only then are the old version's objects and the leftovers of interrupted writes
deleted. A write that is interrupted leaves the old dataset (or none) whole. A write holds
the destination's lease (`_write_lease.py`) from start to end: a second writer to the same URL
fails at once, and one whose lease was taken over, or whose dataset was replaced meanwhile,
fails at the manifest, leaving the other writer's dataset whole. Once the manifest's upload
has begun, nothing it lists is deleted unless another writer's manifest is known to be there:
an interruption or a failure whose outcome is unknown leaves the new dataset (or the old one)
whole.

The staging folder (`chute-upload-PID-*`) is locked by its writer and removed at the end; a
SIGTERM meanwhile is raised as KeyboardInterrupt so that the write is abandoned like any
other failure (staging folder, this write's objects and the lease removed), and the folders
of writers killed outright are removed by the next write on the machine."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path
from types import FrameType

from chute.convert.destination._write_lease import LEASE, WriteLease
from chute.errors import ChuteError
from chute.readers.format import MANIFEST
from chute.readers.storage import Remote, StorageError, listed_objects

__all__ = ["RemoteDestination"]

_OWN = re.compile(r"^w[0-9a-f]{8}-\d{5}/")  # a shard of some write, finished or interrupted
_REPORTS = ("skipped.tsv",)  # written beside the manifest by converters, after it
_STAGING = "chute-upload-"  # + PID-random: the local staging folders, in the temporary folder


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
        self._lease: WriteLease | None = WriteLease(self.remote, self.token, MANIFEST)
        try:
            self._check(overwrite)
        except BaseException:
            self._lease.release()
            raise
        self.staging, self._staging_fd = _staging()
        self._uploaded: list[str] = []
        self._published: set[str] = set()  # listed in a manifest that may be there
        self._term = _term_as_interrupt()

    def _check(self, overwrite: bool) -> None:
        existing = dict(self.remote.list())
        # what the dataset there lists (listed once: every object of the prefix is asked)
        self._old_objects: set[str] = set()
        if MANIFEST in existing:
            if not overwrite:
                raise ChuteError(f"{self.url}: already holds a chute dataset; pass "
                                 "overwrite=True (--overwrite) to replace it")
            try:
                self._old_objects = listed_objects(json.loads(self.remote.get_bytes(MANIFEST)))
            except ValueError:
                pass  # a damaged manifest: its objects go with the leftovers
        foreign = sorted(n for n in existing
                         if n not in (MANIFEST, LEASE) and not _OWN.match(n)
                         and n not in _REPORTS and n not in self._old_objects)
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
        self._old_objects = set()
        self._lease = None  # the writer that commits holds the destination's lease
        self.staging, self._staging_fd = _staging()
        self._uploaded = []
        self._published = set()
        self._term = False  # the task's process handles its own signals
        return self

    def check(self) -> None:
        """Raise when this write may not go on (its lease was lost to another writer)."""
        if self._lease is not None:
            self._lease.check()

    def finish(self) -> None:
        """A task's shards are all uploaded: remove its local staging folder."""
        self._drop_staging()

    def _drop_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        if self._staging_fd is not None:
            os.close(self._staging_fd)
            self._staging_fd = None
        if self._term:
            self._term = False
            _term_restored()

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
        data = manifest_path.read_bytes()
        new = json.loads(data)
        assert self._lease is not None
        self._published = listed_objects(new)  # from here on the new dataset may be the one there
        try:
            self._lease.put_manifest(MANIFEST, data)
        except ChuteError:
            if self._lease.lost is not None:  # another writer's manifest is there, or none
                self._published = set()     # was put: this write's objects are its own
            raise
        keep = self._published | {MANIFEST}
        try:  # the old skipped.tsv too: the new one, if any, is written after this
            stale = [n for n, _ in self.remote.list() if n not in keep and
                     (_OWN.match(n) or n in _REPORTS or n in self._old_objects)]
            self.remote.delete(stale)
        except StorageError:
            pass  # the new dataset is complete; leftovers go at the next write
        self._lease.release()
        self._drop_staging()

    def abort(self) -> None:
        """Remove this write's objects, and while it holds the lease every other write's
        leftovers too (the parts of a distributed write's tasks); best effort: the next write
        removes any left. Objects a manifest this write may have put lists are kept."""
        self._drop_staging()
        names = list(self._uploaded)
        lease = self._lease
        if lease is not None and lease.lost is not None:  # tables share the other's names
            names = [n for n in names if n.startswith(f"w{self.token}-")]
        elif lease is not None:
            try:
                names += [n for n, _ in self.remote.list()
                          if _OWN.match(n) and n not in self._old_objects]
            except StorageError:
                pass
        names = [n for n in names if n not in self._published]
        try:  # before the lease goes: a writer after us may write shards of its own
            self.remote.delete(sorted(set(names)))
        except StorageError:
            pass
        if lease is not None:
            lease.release()


def _staging() -> tuple[Path, int | None]:
    """A new local staging folder, and a descriptor holding its lock for the write's life.
    The folders of writers that died first go."""
    _sweep_staging()
    path = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{os.getpid()}-"))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def _sweep_staging() -> None:
    """Remove this user's staging folders whose writer is dead (its pid gone) and holds no
    lock on them (a writer in another pid namespace sharing the folder holds one)."""
    root = tempfile.gettempdir()
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(_STAGING)]
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(_STAGING):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass  # locked: its writer lives
        finally:
            os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass
    return pid > 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one kills at once
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _term_as_interrupt() -> bool:
    """While a write runs, SIGTERM raises KeyboardInterrupt (so the write is abandoned and
    cleaned up) where it would kill the process outright: in the main thread, with the
    default handler. True when installed."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _interrupt)
    return True


def _term_restored() -> None:
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is _interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
