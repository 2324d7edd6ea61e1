"""Datasets in object storage (`s3://`, `gs://`, `az://`, `abfs://`): one client for every
read and write.

The client is obstore, the Python binding of the Rust `object_store` crate (docs/storage.md
says why): one wheel without Python dependencies, streaming and ranged reads, multipart
uploads, and retries with exponential backoff on connection errors, timeouts and 5xx built in.
Each scheme's store and settings (the provider's standard variables) are in `_schemes/`.

Failures: a permanent one (404, 403, bad credentials) is a StorageError at once, naming the URL
and what to check; anything else (connection refused or reset, timeouts, throttling, 5xx) is
retried with backoff until `CHUTE_S3_RETRY_SECONDS` (default 300) have passed without progress,
so an endpoint that goes away for a while and comes back costs time, not the epoch. Every wait
ends by that deadline (a server that accepts and never answers too); a transfer that receives
nothing for `_IDLE` seconds is resumed where it stopped, so a slow but steady one finishes."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import os
import random
import secrets
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import xxhash

from chute.errors import ChuteError
from chute.readers.storage._schemes import SCHEMES, scheme_of, url_forms

__all__ = ["StorageError", "ConflictError", "UnreachableError", "Remote", "is_remote",
           "is_offline", "REMOTE_SCHEMES", "retry_seconds"]

REMOTE_SCHEMES = tuple(SCHEMES)
_T = TypeVar("_T")
_IDLE = 30.0  # seconds without a byte before a request is cut and retried (resumed)
_UPLOAD_IDLE = 120.0  # ... for a multipart upload, whose parts are read ahead of sending
_REPORT = 10.0  # while a request fails or waits, a line on stderr this often
_GRACE = 0.5  # the shortest try of any request, also one that begins after its outage's deadline
_STREAM_CHUNK = 256 << 10  # small enough that a slow link still delivers one within _IDLE
_PART = 5 << 20  # multipart upload part size
_MAX_BACKOFF = 5.0
_IMDS = "169.254.169.254"  # the instance metadata service, where credentials come last from
_LOCAL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EMFILE)


class StorageError(ChuteError, OSError):
    """Object storage refused a request for good (missing object, no permission, bad
    credentials) or stayed unreachable past the retry deadline."""


class ConflictError(StorageError):
    """A conditional write found the object created or changed by someone else."""


class UnreachableError(StorageError):
    """The endpoint did not answer (refused, reset, silent, 5xx) until the retry deadline."""


class _Transfer:
    """Where a download stands across its attempts: bytes received, and the ETag of the
    object they came from (a resumed request asks for that one only)."""

    def __init__(self, limit: int | None = None) -> None:
        self.offset = 0
        self.e_tag: str | None = None
        self.size: int | None = None
        self.limit = limit  # bytes asked for and kept at most (the manifest's size + 1)

    def restart(self) -> None:
        self.offset, self.e_tag, self.size = 0, None, None


def is_offline() -> bool:
    """`CHUTE_OFFLINE` is set to a true value: never ask the object storage server."""
    return os.environ.get("CHUTE_OFFLINE", "").strip().lower() not in ("", "0", "false", "no")


def is_remote(path_or_url) -> bool:
    """True for a URL of object storage (`s3://...`, `gs://...`, `az://...`, `abfs://...`)."""
    text = str(path_or_url)
    return "://" in text and urlparse(text).scheme in REMOTE_SCHEMES


def retry_seconds() -> float:
    """How long a request is retried before it fails: `CHUTE_S3_RETRY_SECONDS` (default 300)."""
    text = os.environ.get("CHUTE_S3_RETRY_SECONDS", "300")
    try:
        value = float(text)
    except ValueError:
        raise ChuteError(f"CHUTE_S3_RETRY_SECONDS={text!r} is not a number of seconds; set it "
                         "to e.g. 300") from None
    return max(value, 0.0)


def _short(exc: BaseException) -> str:
    """The first line of an obstore error (they carry a multi-line debug dump)."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class _Outage:
    """Since when the requests of this process to one endpoint fail or wait unanswered (None:
    it answers), shared by all of them: every request of one outage ends by one deadline, and
    one line every `_REPORT` seconds speaks for all of them."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.last = 0.0  # when a request last failed
        self.next_report = 0.0


_OUTAGES: dict[str, _Outage] = {}
_OUTAGES_LOCK = threading.Lock()


def _outage(endpoint: str) -> _Outage:
    with _OUTAGES_LOCK:
        return _OUTAGES.setdefault(endpoint, _Outage())


class _Clock:
    """The deadline of one request and its retries: `CHUTE_S3_RETRY_SECONDS` after it began or
    after its last progress (a byte received or read for upload), so a slow but steady transfer
    goes on while a stalled or failing one ends by the deadline, and no later than that after
    the endpoint's outage began (a request queued behind others that failed does not wait
    again); while it fails or waits, a line on stderr about every 10 s says so
    (docs/storage.md, "Failures")."""

    def __init__(self, where: str, what: str, seconds: float | None = None,
                 outage: _Outage | None = None):
        self.where, self.what = where, what
        self.seconds = retry_seconds() if seconds is None else seconds
        self.outage = _Outage() if outage is None else outage
        self.began = self.since = time.monotonic()
        if self.outage.since is not None and self.began - self.outage.last > _REPORT:
            self.outage.since = None  # nothing failed lately: a new try, a whole deadline
        self.deadline = self.since + self.seconds
        self.next_report = self.since + _REPORT

    def progress(self) -> None:
        self.since = time.monotonic()
        self.deadline = self.since + self.seconds
        self.next_report = self.since + _REPORT
        self.outage.since = None  # the endpoint answers

    def failing(self, since: float) -> None:
        """A request has failed or waited unanswered since `since`."""
        outage = self.outage
        outage.last = time.monotonic()
        if outage.since is None or since < outage.since:
            outage.since = max(since, self.since)

    def left(self) -> float:
        deadline, outage = self.deadline, self.outage
        if outage.since is not None:
            # one outage, one deadline; past it, a request gets one short try when no other
            # request has failed lately (the endpoint may be back)
            deadline = min(deadline, outage.since + self.seconds)
            # ...and every request is tried: one begun just after another failed finds a
            # server that is back (it was never sent, and failed at once, before)
            deadline = max(deadline, self.began + _GRACE)
        return deadline - time.monotonic()

    def report(self, reason: str) -> None:
        now = time.monotonic()
        if now >= max(self.next_report, self.outage.next_report):
            self.next_report = self.outage.next_report = now + _REPORT
            since = min(self.since, self.outage.since or self.since)
            print(f"chute: {self.where}: {self.what} failing for {now - since:.0f} s "
                  f"({reason}); retrying until {self.seconds:.0f} s without progress "
                  "(CHUTE_S3_RETRY_SECONDS)", file=sys.stderr, flush=True)

    async def sleep(self, seconds: float, reason: str) -> None:
        """Back off for `seconds`, reporting `reason` when a line is due meanwhile."""
        wake = time.monotonic() + seconds
        while True:
            self.report(reason)
            now = time.monotonic()
            if now >= wake:
                return
            due = max(self.next_report, self.outage.next_report)
            await asyncio.sleep(max(min(wake, due) - now, 0.0))

    async def wait(self, aw: Awaitable[_T], idle: float | None = None) -> _T:
        """The result of `aw`, or TimeoutError once `idle` seconds (default `_IDLE`) pass
        without progress or at the deadline, whichever comes first (the request is cancelled:
        its connection closed)."""
        idle = _IDLE if idle is None else idle
        task = asyncio.ensure_future(aw)
        began = time.monotonic()
        try:
            while not task.done():
                now = time.monotonic()
                quiet = max(began, self.since)
                end = min(quiet + idle, now + self.left())
                if now >= end:
                    self.failing(quiet)
                    since = min(quiet, self.outage.since or quiet)  # the outage's, if earlier
                    raise TimeoutError(f"no answer for {now - since:.0f} s")
                due = max(self.next_report, self.outage.next_report)
                await asyncio.wait({task}, timeout=max(min(end, due) - now, 0.01))
                if not task.done():
                    self.report(f"no answer for {time.monotonic() - quiet:.0f} s")
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to its end from synchronous code (on a helper thread when this thread runs an
    event loop already)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Remote:
    """A folder in object storage: `s3://bucket/prefix` (or gs://, az://, abfs://); names are
    relative to it.

    Args:
        url: `s3://bucket` or `s3://bucket/some/prefix` (a trailing slash is ignored); `gs://`
            and `az://CONTAINER/...` (`abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/...`)
            alike.
        offline: never ask the server (`CHUTE_OFFLINE=1` does the same): every request fails
            at once with a StorageError saying so.
    """

    def __init__(self, url: str, *, offline: bool = False):
        parsed = urlparse(str(url))
        scheme = scheme_of(parsed.scheme)
        if scheme is None or not parsed.netloc:
            raise ChuteError(f"{url}: not an object storage URL; write {url_forms()}")
        self.scheme = scheme
        self.bucket = scheme.bucket(parsed.netloc)
        self._host = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"{parsed.scheme}://{parsed.netloc}" + (f"/{self.prefix}" if self.prefix
                                                           else "")
        self.offline = offline or is_offline()
        self._store = None

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def __reduce__(self):
        return (_remote, (self.url, self.offline))

    def where(self, name: str = "") -> str:
        """The URL of `name` inside this folder."""
        return f"{self.url}/{name}" if name else self.url

    def settings(self) -> dict[str, Any]:
        """The store's configuration now (the environment's settings, then shared files)."""
        return self.scheme.settings(self._host)

    def endpoint(self) -> str:
        """The endpoint the requests go to, as messages name it."""
        return str(self.settings().get(self.scheme.endpoint_key) or self.scheme.default_endpoint)

    @property
    def store(self):
        if self._store is None:
            try:
                import obstore.store
            except ImportError:
                raise ChuteError(f"{self.url}: reading object storage needs obstore: "
                                 "pip install 'chute[s3]'") from None
            config = self.settings()
            endpoint = str(config.get(self.scheme.endpoint_key, ""))
            # every retry and every wait is ours (`_call`, `_Clock.wait`): they end by the
            # deadline and say so while they last; the client's own request timeout would
            # cover a whole body (a slow but steady download), so it is only a far backstop
            self._store = getattr(obstore.store, self.scheme.store)(
                self.bucket, prefix=self.prefix or None, config=config,
                client_options={"allow_http": endpoint.startswith("http:")
                                or bool(config.get("use_emulator")),
                                "connect_timeout": timedelta(seconds=5),
                                "timeout": timedelta(days=1)},
                retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=1),
                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                          "max_backoff": timedelta(seconds=2), "base": 2}})
        return self._store

    # -- one request, retried --------------------------------------------------------------
    def _call(self, what: str, name: str, attempt: Callable[[_Clock], Awaitable[_T]], *,
              seconds: float | None = None) -> _T:
        """`attempt(clock)` retried on transient failures until the clock's deadline (its
        waits end there too); permanent failures raise a StorageError naming the object.
        `seconds`: another deadline than CHUTE_S3_RETRY_SECONDS."""
        if self.offline:
            raise StorageError(f"{self.where(name)}: {what} not attempted: offline "
                               "(CHUTE_OFFLINE=1 or offline=True); the file is not in the node "
                               "cache: unset CHUTE_OFFLINE to fetch it")
        clock = _Clock(self.where(name), what, seconds, _outage(self.endpoint()))
        return _run(self._retried(what, name, attempt, clock))

    async def _retried(self, what: str, name: str, attempt, clock: _Clock):
        import obstore.exceptions as obx

        delay = 0.1
        while True:
            began = time.monotonic()
            try:
                result = await attempt(clock)
                clock.outage.since = None  # the endpoint answers
                return result
            except (obx.AlreadyExistsError, obx.PreconditionError) as exc:
                raise ConflictError(f"{self.where(name)}: {what} refused: the object was "
                                    f"created or changed meanwhile ({_short(exc)})") from None
            except (FileNotFoundError, obx.NotFoundError) as exc:
                self._missing_bucket(name, exc)
                raise StorageError(f"{self.where(name)}: not found in object storage; check the "
                                   "URL (bucket and prefix) and that the dataset was written "
                                   "there completely") from None
            except (obx.PermissionDeniedError, obx.UnauthenticatedError, PermissionError) as exc:
                raise StorageError(f"{self.where(name)}: access denied ({_short(exc)}); check "
                                   f"the {self.scheme.holder}'s permissions and "
                                   f"{self.scheme.credentials}") from None
            except (obx.InvalidPathError, obx.UnknownConfigurationKeyError,
                    obx.NotSupportedError) as exc:
                raise StorageError(f"{self.where(name)}: {what} refused ({_short(exc)}); check "
                                   f"the URL and {self.scheme.credentials}") from None
            except (obx.BaseError, OSError, TimeoutError, ConnectionError) as exc:
                if isinstance(exc, StorageError) or getattr(exc, "errno", None) in _LOCAL:
                    raise  # a full or read-only local disk: retrying does not help
                if _IMDS in str(exc) and "status code: 4" in str(exc):
                    # no credentials configured, and the instance metadata service refused
                    raise StorageError(
                        f"{self.where(name)}: no {self.scheme.label} credentials found; set "
                        f"{self.scheme.credentials}") from None
                self._missing_bucket(name, exc)
                if clock.since > began:
                    delay = 0.1  # it made progress: a new outage starts small again
                clock.failing(max(began, clock.since))
                if clock.left() > 0:
                    await clock.sleep(min(delay * (0.5 + random.random() / 2), clock.left()),
                                      _short(exc))
                    delay = min(delay * 2, _MAX_BACKOFF)
                if clock.left() <= 0:  # no try left: the last failure is the reason
                    raise UnreachableError(
                        f"{self.where(name)}: {what} failed for {clock.seconds:.0f} s "
                        f"({_short(exc)}); check that the endpoint "
                        f"({self.endpoint()}) is reachable, or raise "
                        "CHUTE_S3_RETRY_SECONDS") from None

    def _missing_bucket(self, name: str, exc: BaseException) -> None:
        """Raise a StorageError saying so when `exc` is the provider's missing-bucket answer."""
        if any(code in str(exc) for code in self.scheme.missing_bucket):
            raise StorageError(f"{self.where(name)}: the {self.scheme.holder} {self.bucket!r} "
                               "does not exist; create it or check the URL") from None

    async def _stream(self, clock: _Clock, name: str, state: _Transfer, sink) -> None:
        """Stream object `name` into `sink(chunk)` from `state.offset` on, resuming where an
        earlier attempt stopped (only from the same object: its ETag must still match)."""
        import obstore
        import obstore.exceptions as obx

        if state.size is not None and state.offset >= state.size:
            return  # every byte arrived before the connection broke
        options: Any = {}
        if state.offset:
            options = {"range": {"offset": state.offset}, "if_match": state.e_tag}
        if state.limit is not None and state.limit > 1:  # (an empty object has no range)
            options = {**options, "range": (state.offset, state.limit)}
        try:
            result = await clock.wait(obstore.get_async(self.store, name, options=options))
        except obx.PreconditionError:
            state.restart()  # changed since the first bytes: all again, from the start
            sink(None)
            raise ConnectionError("the object changed during the download") from None
        if not state.offset:
            state.e_tag, state.size = result.meta.get("e_tag"), result.meta.get("size")
        elif result.range[0] != state.offset:  # a server that ignored the range: all again
            offset = state.offset
            state.restart()
            sink(None)
            raise ConnectionError(f"the server did not resume the transfer at byte {offset}")
        stream = result.stream(min_chunk_size=_STREAM_CHUNK)
        while True:
            try:
                chunk = await clock.wait(stream.__anext__())
            except StopAsyncIteration:
                return
            if state.limit is not None and state.offset + len(chunk) >= state.limit:
                # one byte past the manifest's size tells a wrong object: stop there
                kept = memoryview(chunk)[:state.limit - state.offset]
                sink(kept)
                state.offset += len(kept)
                return
            sink(chunk)
            state.offset += len(chunk)
            clock.progress()

    # -- reads -----------------------------------------------------------------------------
    def get_bytes(self, name: str, *, seconds: float | None = None) -> bytes:
        """The whole object `name`; `seconds`: another retry deadline than
        CHUTE_S3_RETRY_SECONDS (a short one where a cached copy can stand in)."""
        state = _Transfer()
        parts: list[bytes] = []

        def sink(chunk) -> None:
            if chunk is None:
                parts.clear()
            else:
                parts.append(bytes(chunk))

        async def attempt(clock: _Clock) -> bytes:
            await self._stream(clock, name, state, sink)
            return b"".join(parts)
        return self._call("download", name, attempt, seconds=seconds)

    def download(self, name: str, dest: Path, size: int | None = None,
                 checksum: str | None = None, *, temp: Path | None = None,
                 attempts: int = 3) -> None:
        """Object `name` into `dest`: written to `temp` (a new temporary name beside `dest`
        when None; an existing file is overwritten in place, keeping its reserved size until
        the end), checked against `size` and the xxh3_64 `checksum` when given, then renamed.
        A transfer that stalls (no byte for a while) or breaks is resumed where it stopped;
        one that does not match is fetched again up to `attempts` times, then a
        StorageError."""
        dest = Path(dest)
        if temp is None:
            temp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(3)}")
        part = temp
        problem = ""
        for _ in range(attempts):
            try:
                got, digest = self._download_once(name, part,
                                                  None if size is None else size + 1)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            if size is not None and got != size:
                problem = f"{got} bytes arrived, the manifest says {size}"
            elif checksum is not None and digest != checksum:
                problem = f"checksum {digest} differs from the manifest's {checksum}"
            else:
                os.replace(part, dest)
                return
        part.unlink(missing_ok=True)
        raise StorageError(f"{self.where(name)}: {problem} ({attempts} downloads); the object "
                           "was changed or damaged in storage: re-convert the dataset there")

    def _download_once(self, name: str, part: Path,
                       limit: int | None = None) -> tuple[int, str]:
        """Object `name` into the file `part`, resumed where a stalled or broken attempt
        stopped, at most `limit` bytes asked for and written; (bytes, xxh3_64 hex digest)."""
        state = _Transfer(limit)
        hasher = xxhash.xxh3_64()
        with open(part, "r+b" if part.exists() else "wb") as f:
            def sink(chunk) -> None:
                nonlocal hasher
                if chunk is None:  # starting again from the first byte
                    hasher = xxhash.xxh3_64()
                    f.seek(0)
                    return
                if f.tell() != state.offset:
                    f.seek(state.offset)  # a resumed transfer
                f.write(chunk)
                hasher.update(chunk)

            self._call("download", name, lambda clock: self._stream(clock, name, state, sink))
            f.truncate(state.offset)
            f.flush()
            os.fsync(f.fileno())
        return state.offset, hasher.hexdigest()

    def checksum(self, name: str) -> tuple[int, str]:
        """(size, xxh3_64 hex digest) of object `name`, streamed (nothing is stored)."""
        state = _Transfer()
        hasher = xxhash.xxh3_64()

        def sink(chunk) -> None:
            nonlocal hasher
            if chunk is None:
                hasher = xxhash.xxh3_64()
            else:
                hasher.update(chunk)

        async def attempt(clock: _Clock) -> tuple[int, str]:
            await self._stream(clock, name, state, sink)
            return state.offset, hasher.hexdigest()
        return self._call("download", name, attempt)

    def list(self) -> Iterator[tuple[str, int]]:  # noqa: A003
        """(name, size) of every object under the prefix."""
        import obstore

        async def attempt(clock: _Clock) -> builtins.list:
            pages = []
            stream = obstore.list(self.store)
            while True:
                try:
                    pages.append(await clock.wait(stream.__anext__()))
                except StopAsyncIteration:
                    return pages
                clock.progress()

        for page in self._call("listing", "", attempt):
            for meta in page:
                yield str(meta["path"]), int(meta["size"])

    # -- writes ----------------------------------------------------------------------------
    def put_file(self, name: str, path: Path) -> None:
        """Upload the local file `path` as object `name` (multipart for large files)."""
        import obstore

        async def attempt(clock: _Clock) -> None:
            if os.path.getsize(path) <= _PART:
                data = Path(path).read_bytes()
                await clock.wait(obstore.put_async(self.store, name, data))
                return

            def chunks() -> Iterator[bytes]:
                with open(path, "rb") as f:
                    while chunk := f.read(_PART):
                        clock.progress()  # read to be sent: the upload moves on
                        yield chunk
            # parts in flight are bounded so that reading the file keeps measuring progress
            await clock.wait(obstore.put_async(self.store, name, chunks(), chunk_size=_PART,
                                               max_concurrency=4), _UPLOAD_IDLE)
        self._call("upload", name, attempt)

    def put_bytes(self, name: str, data: bytes, *, create: bool = False,
                  if_match: str | None = None) -> str | None:
        """Write `data` as object `name`; returns its tag (the ETag; a GCS object's
        generation, what GCS compares). A conditional write raises ConflictError when the
        object exists (`create`) or no longer has the tag `if_match`.

        Args:
            name: the object.
            data: its bytes.
            create: only if no object `name` exists (If-None-Match).
            if_match: only if the object still has this ETag (If-Match).
        """
        import obstore

        tag = self.scheme.tag_key
        mode: Any = "create" if create else \
            {tag: if_match} if if_match is not None else "overwrite"

        async def attempt(clock: _Clock):
            return await clock.wait(obstore.put_async(self.store, name, data, mode=mode))
        return self._call("upload", name, attempt).get(tag)

    def head(self, name: str) -> dict | None:
        """The metadata of object `name` (`e_tag`: the tag `put_bytes(if_match=...)` takes,
        `last_modified`, `size`); None when it does not exist."""
        import obstore
        import obstore.exceptions as obx

        async def attempt(clock: _Clock) -> dict | None:
            try:
                meta = dict(await clock.wait(obstore.head_async(self.store, name)))
            except (FileNotFoundError, obx.NotFoundError) as exc:
                self._missing_bucket(name, exc)
                return None
            meta["e_tag"] = meta.get(self.scheme.tag_key)
            return meta
        return self._call("metadata request", name, attempt)

    def delete(self, names: builtins.list[str]) -> None:
        """Delete the objects `names` (absent ones are not an error)."""
        import obstore

        for start in range(0, len(names), 1000):
            batch = names[start:start + 1000]

            async def attempt(clock: _Clock, b=batch) -> None:
                await clock.wait(obstore.delete_async(self.store, b))
            self._call("delete", batch[0], attempt)


def _remote(url: str, offline: bool) -> Remote:
    return Remote(url, offline=offline)
