"""Datasets in object storage (`s3://bucket/prefix`): one client for every read and write.

The client is obstore, the Python binding of the Rust `object_store` crate (docs/storage.md
says why): one wheel without Python dependencies, streaming and ranged reads, multipart
uploads, and retries with exponential backoff on connection errors, timeouts and 5xx built in.
Configuration comes from the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`,
`AWS_REGION`, ...), then from the shared config and credentials files (`AWS_PROFILE`,
`~/.aws/config`, `~/.aws/credentials`), which obstore alone does not read.

Failures: a permanent one (404, 403, bad credentials) is a StorageError at once, naming the URL
and what to check; anything else (connection refused or reset, timeouts, throttling, 5xx) is
retried with backoff until `CHUTE_S3_RETRY_SECONDS` (default 300) have passed, so an endpoint
that goes away for a while and comes back costs time, not the epoch."""

from __future__ import annotations

import builtins
import configparser
import errno
import os
import random
import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import xxhash

from chute.errors import ChuteError

__all__ = ["StorageError", "ConflictError", "Remote", "is_remote", "REMOTE_SCHEMES",
           "retry_seconds"]

REMOTE_SCHEMES = ("s3",)
_CHUNK = 8 << 20
_MAX_BACKOFF = 5.0
_IMDS = "169.254.169.254"  # the instance metadata service, where credentials come last from
_LOCAL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EMFILE)


class StorageError(ChuteError, OSError):
    """Object storage refused a request for good (missing object, no permission, bad
    credentials) or stayed unreachable past the retry deadline."""


class ConflictError(StorageError):
    """A conditional write found the object created or changed by someone else."""


def is_remote(path_or_url) -> bool:
    """True for a URL of object storage (`s3://...`)."""
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


def _profile_settings() -> dict[str, str]:
    """Settings of the AWS profile ($AWS_PROFILE or "default") from the shared config and
    credentials files, as obstore config keys."""
    profile = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path.home() / ".aws"
    found: dict[str, str] = {}
    sources = [(os.environ.get("AWS_CONFIG_FILE") or str(home / "config"),
                profile if profile == "default" else f"profile {profile}"),
               (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or str(home / "credentials"),
                profile)]
    names = {"aws_access_key_id": "access_key_id", "aws_secret_access_key": "secret_access_key",
             "aws_session_token": "session_token", "region": "region",
             "endpoint_url": "endpoint"}
    for path, section in sources:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error as exc:
            raise ChuteError(f"{path}: not a valid AWS config file ({exc}); fix or move it") \
                from None
        if parser.has_section(section):
            for key, name in names.items():
                if parser.has_option(section, key):
                    found.setdefault(name, parser.get(section, key).strip())
    return found


def _store_config() -> dict[str, str]:
    """obstore S3 settings: the AWS variables first, the profile's files for what they lack."""
    env = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY",
           "session_token": "AWS_SESSION_TOKEN", "region": "AWS_REGION",
           "endpoint": "AWS_ENDPOINT_URL"}
    config = {name: os.environ[var] for name, var in env.items() if os.environ.get(var)}
    if "region" not in config and os.environ.get("AWS_DEFAULT_REGION"):
        config["region"] = os.environ["AWS_DEFAULT_REGION"]
    if "endpoint" not in config and os.environ.get("AWS_ENDPOINT_URL_S3"):
        config["endpoint"] = os.environ["AWS_ENDPOINT_URL_S3"]
    for name, value in _profile_settings().items():
        config.setdefault(name, value)
    if "session_token" in config and "access_key_id" not in config:
        del config["session_token"]
    return config


def _short(exc: BaseException) -> str:
    """The first line of an obstore error (they carry a multi-line debug dump)."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class Remote:
    """A folder in object storage: `s3://bucket/prefix`; names are relative to it.

    Args:
        url: `s3://bucket` or `s3://bucket/some/prefix` (a trailing slash is ignored).
    """

    def __init__(self, url: str):
        parsed = urlparse(str(url))
        if parsed.scheme not in REMOTE_SCHEMES or not parsed.netloc:
            raise ChuteError(f"{url}: not an object storage URL; write s3://BUCKET/PREFIX")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._store = None

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def __reduce__(self):
        return (Remote, (self.url,))

    def where(self, name: str = "") -> str:
        """The URL of `name` inside this folder."""
        return f"{self.url}/{name}" if name else self.url

    @property
    def store(self):
        if self._store is None:
            try:
                from obstore.store import S3Store
            except ImportError:
                raise ChuteError(f"{self.url}: reading object storage needs obstore: "
                                 "pip install 'chute[s3]'") from None
            config = _store_config()
            # obstore's own retries handle one request; ours (`_call`) bound the total time
            per_request = max(min(retry_seconds(), 30.0), 1.0)
            self._store = S3Store(
                self.bucket, prefix=self.prefix or None, config=config,
                client_options={"allow_http": config.get("endpoint", "").startswith("http:"),
                                "connect_timeout": timedelta(seconds=5),
                                "timeout": timedelta(seconds=120)},
                retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=per_request),
                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                          "max_backoff": timedelta(seconds=2), "base": 2}})
        return self._store

    # -- one request, retried --------------------------------------------------------------
    def _call(self, what: str, name: str, fn):
        """`fn()` retried on transient failures until the deadline; permanent ones raise a
        StorageError naming the object."""
        import obstore.exceptions as obx

        deadline = time.monotonic() + retry_seconds()
        delay = 0.1
        while True:
            try:
                return fn()
            except (obx.AlreadyExistsError, obx.PreconditionError) as exc:
                raise ConflictError(f"{self.where(name)}: {what} refused: the object was "
                                    f"created or changed meanwhile ({_short(exc)})") from None
            except (FileNotFoundError, obx.NotFoundError):
                raise StorageError(f"{self.where(name)}: not found in object storage; check the "
                                   "URL (bucket and prefix) and that the dataset was written "
                                   "there completely") from None
            except (obx.PermissionDeniedError, obx.UnauthenticatedError, PermissionError) as exc:
                raise StorageError(f"{self.where(name)}: access denied ({_short(exc)}); check "
                                   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
                                   "and the bucket's permissions") from None
            except (obx.InvalidPathError, obx.UnknownConfigurationKeyError,
                    obx.NotSupportedError) as exc:
                raise StorageError(f"{self.where(name)}: {what} refused ({_short(exc)}); check "
                                   "the URL and the AWS_* settings") from None
            except (obx.BaseError, OSError, TimeoutError, ConnectionError) as exc:
                if isinstance(exc, StorageError) or getattr(exc, "errno", None) in _LOCAL:
                    raise  # a full or read-only local disk: retrying does not help
                if _IMDS in str(exc) and "status code: 4" in str(exc):
                    # no credentials configured, and the instance metadata service refused
                    raise StorageError(
                        f"{self.where(name)}: no AWS credentials found; set AWS_ACCESS_KEY_ID "
                        "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), plus AWS_ENDPOINT_URL for "
                        "an S3-compatible store") from None
                if time.monotonic() + delay > deadline:
                    raise StorageError(
                        f"{self.where(name)}: {what} failed for {retry_seconds():.0f} s "
                        f"({_short(exc)}); check that the endpoint "
                        f"({_store_config().get('endpoint', 'AWS S3')}) is reachable, or raise "
                        "CHUTE_S3_RETRY_SECONDS") from None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, _MAX_BACKOFF)

    # -- reads -----------------------------------------------------------------------------
    def get_bytes(self, name: str) -> bytes:
        """The whole object `name`."""
        import obstore

        return self._call("download", name,
                          lambda: bytes(obstore.get(self.store, name).bytes()))

    def download(self, name: str, dest: Path, size: int | None = None,
                 checksum: str | None = None, *, temp: Path | None = None,
                 attempts: int = 3) -> None:
        """Object `name` into `dest`: written to `temp` (a new temporary name beside `dest`
        when None; an existing file is overwritten in place, keeping its reserved size until
        the end), checked against `size` and the xxh3_64 `checksum` when given, then renamed.
        A download that does not match is fetched again up to `attempts` times, then a
        StorageError."""
        import obstore

        dest = Path(dest)
        if temp is None:
            temp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(3)}")
        part = temp
        problem = ""
        for _ in range(attempts):
            def fetch() -> tuple[int, str]:
                hasher = xxhash.xxh3_64()
                count = 0
                with open(part, "r+b" if part.exists() else "wb") as f:
                    for chunk in obstore.get(self.store, name).stream(min_chunk_size=_CHUNK):
                        f.write(chunk)
                        hasher.update(chunk)
                        count += len(chunk)
                    f.truncate()
                    f.flush()
                    os.fsync(f.fileno())
                return count, hasher.hexdigest()

            try:
                got, digest = self._call("download", name, fetch)
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

    def checksum(self, name: str) -> tuple[int, str]:
        """(size, xxh3_64 hex digest) of object `name`, streamed (nothing is stored)."""
        import obstore

        def digest() -> tuple[int, str]:
            hasher = xxhash.xxh3_64()
            count = 0
            for chunk in obstore.get(self.store, name).stream(min_chunk_size=_CHUNK):
                hasher.update(chunk)
                count += len(chunk)
            return count, hasher.hexdigest()

        return self._call("download", name, digest)

    def list(self) -> Iterator[tuple[str, int]]:  # noqa: A003
        """(name, size) of every object under the prefix."""
        import obstore

        pages = self._call("listing", "", lambda: [list(p) for p in obstore.list(self.store)])
        for page in pages:
            for meta in page:
                yield str(meta["path"]), int(meta["size"])

    # -- writes ----------------------------------------------------------------------------
    def put_file(self, name: str, path: Path) -> None:
        """Upload the local file `path` as object `name` (multipart for large files)."""
        import obstore

        def put() -> None:
            with open(path, "rb") as f:
                obstore.put(self.store, name, f)
        self._call("upload", name, put)

    def put_bytes(self, name: str, data: bytes, *, create: bool = False,
                  if_match: str | None = None) -> str | None:
        """Write `data` as object `name`; returns its ETag. A conditional write raises
        ConflictError when the object exists (`create`) or no longer has the ETag `if_match`.

        Args:
            name: the object.
            data: its bytes.
            create: only if no object `name` exists (If-None-Match).
            if_match: only if the object still has this ETag (If-Match).
        """
        import obstore

        mode: Any = "create" if create else \
            {"e_tag": if_match} if if_match is not None else "overwrite"
        result = self._call("upload", name, lambda: obstore.put(self.store, name, data,
                                                                mode=mode))
        return result.get("e_tag")

    def head(self, name: str) -> dict | None:
        """The metadata of object `name` (`e_tag`, `last_modified`, `size`); None when it
        does not exist."""
        import obstore
        import obstore.exceptions as obx

        def head() -> dict | None:
            try:
                return dict(obstore.head(self.store, name))
            except (FileNotFoundError, obx.NotFoundError):
                return None
        return self._call("metadata request", name, head)

    def delete(self, names: builtins.list[str]) -> None:
        """Delete the objects `names` (absent ones are not an error)."""
        import obstore

        for start in range(0, len(names), 1000):
            batch = names[start:start + 1000]
            self._call("delete", batch[0], lambda b=batch: obstore.delete(self.store, b))
