"""Every path a manifest names stays inside its dataset folder (docs/design.md, "Shard format").

A manifest names shard folders, the files inside them, field file stems and table files. Each
of these must be one plain path component, and the file it leads to (after following symlinks)
must lie inside the dataset folder: a `../x`, an absolute path or a symlink leading out is a
FormatError. Readers, `chute verify` and `chute meta update` all go through `inside`."""

from __future__ import annotations

import os
from pathlib import Path

from chute.errors import FormatError

__all__ = ["plain_name", "inside"]


def plain_name(name, what: str, manifest: Path) -> str:
    """`name` when it is one path component (not empty, ".", ".." and without separators or
    NUL); else a FormatError naming the manifest and `what` (e.g. "shard name")."""
    if not isinstance(name, str) or name in ("", ".", "..") or \
            any(c in name for c in ("/", "\\", "\0")):
        raise FormatError(f"{manifest}: {what} {name!r} is not a plain name inside the dataset "
                          "folder (no '/', '..' or absolute paths); the manifest is corrupt or "
                          "was edited by hand")
    return name


def inside(root: Path, *parts: str, what: str) -> Path:
    """`root / parts...` after checking that it resolves (symlinks followed) inside `root`."""
    path = Path(root).joinpath(*parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise FormatError(f"{path}: {what} leads outside the dataset folder {root} (to {real}); "
                          "a dataset must hold its own files: copy them in instead of linking")
    return path
