"""Local paths from paths and `file://` URLs (other schemes refused in one line), and where a
write goes (a path, or an object-storage URL); datasets are opened by `readers/_open.py`, which
hands object storage to `readers/storage/_object_store.py` and the node cache
(docs/storage.md)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from chute.errors import FormatError

__all__ = ["SCHEMES", "local_path", "destination", "beside", "name_of"]


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
