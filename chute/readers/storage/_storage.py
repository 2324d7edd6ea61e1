"""Storage addressed by URL: one place that turns a dataset URL into something readable.
Only local files exist today (`file://` URLs and plain paths); an object store plugs in as one
more scheme here (docs/design.md, "Storage and identity")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from chute.errors import FormatError

__all__ = ["SCHEMES", "DatasetRef", "local_path", "open_url"]


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
        if writing:
            raise FormatError(f"{text}: cannot write to storage scheme {scheme!r} (chute writes "
                              "datasets to local folders); write to a local folder and copy it")
        raise FormatError(f"{text}: storage scheme {scheme!r} is not supported (chute reads "
                          f"{sorted(SCHEMES)}); copy the dataset to a local folder")
    return SCHEMES[scheme](text)


def open_url(url: str, *, bytes_field: str = "data", **options):
    """Open the dataset at `url` (a plain path works too); `bytes_field` names a Megatron
    pair's one field; `options` go to `open_dataset` (a zarr group's sample_array, ...)."""
    from chute.readers._dataset import open_dataset

    return open_dataset(local_path(url), bytes_field=bytes_field, **options)  # zarr's


@dataclass(frozen=True)
class DatasetRef:
    """A dataset's identity across processes: its storage URL and fingerprint. `open()` in
    another process (a DALI worker, a DDP rank) refuses a dataset that changed meanwhile."""

    url: str
    fingerprint: str
    bytes_field: str = "data"  # what a Megatron pair's field was called when it was opened
    options: tuple = ()  # (name, value) of open_dataset's options (a zarr group's sample_array)

    @classmethod
    def of(cls, dataset) -> DatasetRef:
        options = tuple(sorted(getattr(dataset, "open_options", {}).items()))
        return cls(dataset.url, dataset.fingerprint, getattr(dataset, "_bytes_field", "data"),
                   options)

    def open(self):
        dataset = open_url(self.url, bytes_field=self.bytes_field, **dict(self.options))
        if dataset.fingerprint != self.fingerprint:
            raise FormatError(f"{self.url}: the dataset changed since it was opened "
                              f"(fingerprint {dataset.fingerprint}, expected {self.fingerprint}); "
                              "restart the job on the new version")
        return dataset
