"""One writer at a time for a dataset in object storage (docs/storage.md, "Writing to
s3://"). Object storage has no lock, but S3 and the stores that follow it have conditional
writes (If-None-Match, If-Match), and that is enough for a lease:

- A writer creates the object `chute.writing` (its token, host and pid) only if it does not
  exist; a second writer finds it and fails at once, naming the holder.
- The holder renews it every tenth of `CHUTE_S3_LEASE_SECONDS` (default 600) while it
  writes, each time only if it is still the one it wrote (If-Match). A lease not renewed for
  that long belongs to a writer that is gone: the next writer takes it over (again only if
  unchanged, so of two that try, one wins), and the writer it was taken from, if it was only
  stalled, finds out at its next renewal or upload and stops.
- The manifest, which makes a write visible, is put only if it is still the one there when
  the write began (or only if there was none), so even a writer that ignored the lease cannot
  have its dataset replaced by one that started before it was published.
- A refusal is believed only after reading the object back (`put_verified`): a conditional
  write the server applied but whose reply was lost (a 500 after applying, a reset) is sent
  again by the retries and refused by its own effect; finding this write's own bytes there
  means it was applied, not that another writer won.

`CHUTE_S3_CONDITIONAL_WRITES=0` turns all this off, for a store that refuses conditional
writes: two writers to one URL at once then go undetected."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from datetime import datetime, timezone

from chute.errors import ChuteError
from chute.readers.storage import ConflictError, Remote, StorageError

__all__ = ["WriteLease", "LEASE", "lease_seconds", "put_verified"]

LEASE = "chute.writing"


def lease_seconds() -> float:
    """How long a lease lasts without renewal: `CHUTE_S3_LEASE_SECONDS` (default 600)."""
    text = os.environ.get("CHUTE_S3_LEASE_SECONDS", "600")
    try:
        value = float(text)
    except ValueError:
        raise ChuteError(f"CHUTE_S3_LEASE_SECONDS={text!r} is not a number of seconds; set it "
                         "to e.g. 600") from None
    return max(value, 1.0)


def _enabled() -> bool:
    return os.environ.get("CHUTE_S3_CONDITIONAL_WRITES", "1") != "0"


def put_verified(remote: Remote, name: str, data: bytes, *, create: bool = False,
                 if_match: str | None = None) -> str | None:
    """`remote.put_bytes` with a condition, where a failure is believed only once the object
    is known not to hold `data`: an attempt the server applied but whose reply was lost is
    retried and then refused by its own effect (412), or fails for good after it was applied.
    `data` must be unique to this write (the lease holds the write's token, the manifest its
    shards' names). Returns the object's ETag.

    Args:
        remote: the folder.
        name: the object.
        data: its bytes.
        create: only if no object `name` exists (If-None-Match).
        if_match: only if the object still has this ETag (If-Match).
    """
    try:
        return remote.put_bytes(name, data, create=create, if_match=if_match)
    except StorageError as exc:
        try:
            etag = _holding(remote, name, data)
        except StorageError as unread:
            if isinstance(exc, ConflictError):  # not a conflict until the bytes say so
                raise StorageError(
                    f"{remote.where(name)}: the upload was refused as changed meanwhile and "
                    f"could not be read back ({str(unread).split(': ', 1)[-1]}), so whether an "
                    "earlier attempt of this write was applied is unknown; check the endpoint, "
                    "then what the URL holds (chute info)") from None
            raise exc from None
        if etag is None:
            raise
        return etag


def _holding(remote: Remote, name: str, data: bytes) -> str | None:
    """The ETag of object `name` when it holds `data`, else None; a StorageError when that
    cannot be told. The ETag is read first: were the object replaced in between, its bytes
    are not `data`, and a stale ETag only makes the next conditional write refused (and
    checked)."""
    meta = remote.head(name)
    if meta is None or remote.get_bytes(name) != data:
        return None
    return str(meta["e_tag"])


class WriteLease:
    """The lease of one write to `remote`, held from construction to `release`.

    Args:
        remote: the dataset's folder in object storage.
        token: the write's token (its shards' names carry it).
        manifest: the manifest's object name.
    """

    def __init__(self, remote: Remote, token: str, manifest: str):
        self.remote = remote
        self.enabled = _enabled()
        self.lost: str | None = None  # why this write may not go on, once it may not
        # each renewal writes other bytes (`renewals`), so that its ETag changes and a lost
        # reply is recognised by its bytes whatever the store's ETags are
        self._holder_info = {"token": token, "host": socket.gethostname(), "pid": os.getpid(),
                             "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self._renewals = 0
        self._body = json.dumps({**self._holder_info, "renewals": 0}).encode()
        self._etag: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._manifest: str | None = None
        if not self.enabled:
            return
        self._acquire()
        meta = remote.head(manifest)  # the version this write replaces (None: none)
        self._manifest = None if meta is None else str(meta["e_tag"])
        self._thread = threading.Thread(target=self._renew_loop, name="chute-s3-lease",
                                        daemon=True)
        self._thread.start()

    def _acquire(self) -> None:
        seconds = lease_seconds()
        for _ in range(3):
            try:
                self._etag = put_verified(self.remote, LEASE, self._body, create=True)
                return
            except ConflictError:
                pass
            meta = self.remote.head(LEASE)
            if meta is None:
                continue  # its holder released it just now
            age = time.time() - meta["last_modified"].timestamp()
            dead = self._dead_holder()
            if dead is not None:
                print(f"chute: {self.remote.url}: taking over the lease "
                      f"{self.remote.where(LEASE)} of {dead}, which is no longer running",
                      file=sys.stderr, flush=True)
            elif age <= seconds:
                raise ChuteError(
                    f"{self.remote.url}: another writer ({self._holder()}) is writing this "
                    f"dataset (its lease {self.remote.where(LEASE)} was renewed {age:.0f} s "
                    "ago); wait for it to finish, or if it is gone delete that object or wait "
                    f"{seconds:.0f} s (CHUTE_S3_LEASE_SECONDS) for the lease to expire")
            try:  # its writer is gone: take it over, only if no one else did first
                self._etag = put_verified(self.remote, LEASE, self._body,
                                          if_match=str(meta["e_tag"]))
                return
            except ConflictError:
                continue
        raise ChuteError(f"{self.remote.url}: other writers keep taking the lease "
                         f"{self.remote.where(LEASE)}; write one dataset per URL at a time")

    def _dead_holder(self) -> str | None:
        """The lease's holder ("pid N on HOST since ...") when it is a process of this host
        that no longer runs (as the local lock knows a dead holder), else None."""
        try:
            held = json.loads(self.remote.get_bytes(LEASE))
            host, pid = str(held["host"]), int(held["pid"])
        except (StorageError, ValueError, KeyError, TypeError):
            return None
        if host != socket.gethostname() or pid <= 0:
            return None
        try:
            os.kill(pid, 0)  # signal 0: only asks whether it exists
            return None
        except ProcessLookupError:
            return f"pid {pid} on {host} since {held.get('since', '?')}"
        except OSError:
            return None  # alive (another user's), or cannot be told

    def _holder(self) -> str:
        try:
            held = json.loads(self.remote.get_bytes(LEASE))
            return f"pid {held['pid']} on {held['host']} since {held['since']}"
        except (StorageError, ValueError, KeyError, TypeError):
            return "unknown"

    def _renew(self) -> None:
        with self._lock:
            if self.lost is not None:
                return
            self._renewals += 1
            self._body = json.dumps({**self._holder_info, "renewals": self._renewals}).encode()
            try:
                self._etag = put_verified(self.remote, LEASE, self._body,
                                          if_match=self._etag)
            except StorageError as exc:  # taken over (ConflictError), deleted, or unreachable
                why = "another writer took it over" if isinstance(exc, ConflictError) else \
                    str(exc).split(": ", 1)[-1]
                if self._gone():  # S3 answers If-Match on a missing object 404, moto 412
                    why = ("it was removed: another writer took it over and finished, or it "
                           "was deleted by hand")
                self.lost = (f"{self.remote.url}: this write lost its lease "
                             f"{self.remote.where(LEASE)} ({why}); it stopped and left the "
                             "dataset there as it is; write one dataset per URL at a time")

    def _gone(self) -> bool:
        try:
            return self.remote.head(LEASE) is None
        except StorageError:
            return False

    def _renew_loop(self) -> None:
        every = lease_seconds() / 10
        while not self._stop.wait(every):
            self._renew()
            if self.lost is not None:
                return

    def check(self) -> None:
        """Raise when this write may not go on (its lease was lost)."""
        if self.lost is not None:
            raise ChuteError(self.lost)

    def put_manifest(self, name: str, data: bytes) -> None:
        """Renew the lease, then put the manifest `name` only if it is still the one there
        when the write began: ChuteError when another writer published meanwhile.

        Args:
            name: the manifest's object name.
            data: its bytes.
        """
        if not self.enabled:
            self.remote.put_bytes(name, data)
            return
        self._renew()
        self.check()
        try:
            put_verified(self.remote, name, data, create=self._manifest is None,
                         if_match=self._manifest)
        except ConflictError:
            self.release()  # still this write's lease: free it for the next writer
            self.lost = (f"{self.remote.url}: another writer published a dataset here while "
                         "this one was writing; this write was abandoned and that dataset "
                         "kept; write one dataset per URL at a time")
            raise ChuteError(self.lost) from None

    def release(self) -> None:
        """Stop renewing; delete the lease unless it was lost (best effort: it expires)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self.enabled and self.lost is None and self._etag is not None:
                self._etag = None
                try:
                    self.remote.delete([LEASE])
                except StorageError:
                    pass
