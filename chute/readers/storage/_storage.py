"""Storage addressed by URL: one place that turns a dataset URL into something readable:
local files (`file://` URLs and plain paths) here, object storage (`s3://`, `gs://`, `az://`,
`abfs://`) through
`readers/storage/_object_store.py` and the node cache (docs/storage.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from chute.errors import FormatError

__all__ = ["SCHEMES", "DatasetRef", "local_path", "open_url", "destination", "beside",
           "name_of"]


def _file(url: str) -> Path:
    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise FormatError(f"{url}: file URLs must name a local path (file:///...)")
    return Path(unquote(parsed.path))


# scheme -> function returning a local path for the URL
SCHEMES = {"file": _file}


def local_path(path_or_url: str | os.PathLike[str], *, writing: bool = False) -> Path:
    """A local path for a plain path or a URL of a known scheme.

    Args:
        path_or_url: a path, or a URL such as file:///data/x.chute.
        writing: the path is a destination (the error says so).
    """
    text = str(path_or_url)
    scheme = urlparse(text).scheme if "://" in text else ""
    if not scheme:
        return Path(path_or_url)
    if scheme not in SCHEMES:
        from chute.readers.storage._object_store import REMOTE_SCHEMES

        if scheme in REMOTE_SCHEMES:
            raise FormatError(f"{text}: is in object storage, not a local folder; this command "
                              "needs a local path (datasets in object storage are read with "
                              "open_dataset and written by chute convert / write_dataset)")
        # chute reads and writes local folders (or file://) and object storage
        known = ", ".join(f"{name}://" for name in (*SCHEMES, *REMOTE_SCHEMES))
        if writing:
            raise FormatError(f"{text}: cannot write to storage scheme {scheme!r} (chute writes "
                              f"local folders, {known}); check the URL, or write to a local "
                              "folder and copy it")
        raise FormatError(f"{text}: storage scheme {scheme!r} is not supported (chute reads "
                          f"local folders, {known}); check the URL, or copy the dataset to a "
                          "local folder")
    return SCHEMES[scheme](text)


def destination(path_or_url) -> Path | str:
    """Where a dataset is written: a local path, or the URL (`s3://bucket/prefix`, `gs://...`,
    `az://...`) of one in object storage (ShardWriter uploads it there)."""
    from chute.readers.storage._object_store import Remote, is_remote

    if is_remote(path_or_url):
        return Remote(str(path_or_url)).url
    return local_path(path_or_url, writing=True)


def beside(dest: Path | str, name: str) -> Path | str:
    """File `name` inside destination `dest` (a path, or a URL)."""
    return f"{dest}/{name}" if isinstance(dest, str) else dest / name


def name_of(dest: Path | str) -> str:
    """The last component of a destination, for progress bars."""
    return str(dest).rstrip("/").rsplit("/", 1)[-1] if isinstance(dest, str) else dest.name


def open_url(url: str, *, bytes_field: str = "data", fingerprint: str | None = None,
             **options):
    """Open the dataset at `url` (a plain path works too); `bytes_field` names a Megatron
    pair's one field; `options` are `open_dataset`'s cache settings for `s3://` (a zarr
    group's sample_array, ... for a local one), and a known `fingerprint` lets a remote
    dataset reopen from its cached manifest."""
    from chute.readers._dataset import Dataset, open_dataset
    from chute.readers.storage._object_store import is_remote

    if is_remote(url):
        return Dataset.remote(url, fingerprint=fingerprint, **options)
    return open_dataset(local_path(url), bytes_field=bytes_field, **options)  # zarr's


@dataclass(frozen=True)
class DatasetRef:
    """A dataset's identity across processes: its storage URL and fingerprint. `open()` in
    another process (a DALI worker, a DDP rank) refuses a dataset that changed meanwhile."""

    url: str
    fingerprint: str
    bytes_field: str = "data"  # what a Megatron pair's field was called when it was opened
    options: tuple = ()  # (name, value) of open_dataset's cache settings (s3:// only)

    @classmethod
    def of(cls, dataset) -> DatasetRef:
        options = tuple(sorted(getattr(dataset, "open_options", {}).items()))
        return cls(dataset.url, dataset.fingerprint, getattr(dataset, "_bytes_field", "data"),
                   options)

    def open(self):
        dataset = open_url(self.url, bytes_field=self.bytes_field,
                           fingerprint=self.fingerprint if self.options else None,
                           **dict(self.options))
        if dataset.fingerprint != self.fingerprint:
            raise FormatError(f"{self.url}: the dataset changed since it was opened "
                              f"(fingerprint {dataset.fingerprint}, expected {self.fingerprint}); "
                              "restart the job on the new version")
        return dataset
