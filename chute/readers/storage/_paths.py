"""Every path a manifest names stays inside its dataset folder (docs/design.md, "Shard format"),
and every file chute opens from a zarr store stays inside the store ("Zarr groups").

A manifest names shard folders, the files inside them, field file stems and table files. Each
of these must be one plain path component, and the file it leads to (after following symlinks)
must lie inside the dataset folder: a `../x`, an absolute path or a symlink leading out is a
FormatError. Readers, `chute verify` and `chute meta update` all go through `Confined.check`
(`inside` for a single path: it resolves the root again on every call); the zarr reader
through `Confined`, which resolves the store once and opens each chunk file with the
kernel refusing a way out (`readers/storage/_open_beneath.py`), so the check costs nothing
per chunk."""

from __future__ import annotations

import errno
import os
import stat
import weakref
from pathlib import Path

from chute.errors import FormatError
from chute.readers.storage import _open_beneath

__all__ = ["plain_name", "inside", "Confined", "LeadsOutside", "NotRegular", "check_regular",
           "kind_of"]

_CORRUPT = "the manifest is corrupt or was edited by hand"


def plain_name(name, what: str, manifest: Path, *, folder: str = "dataset folder",
               fix: str = _CORRUPT) -> str:
    """`name` when it is one path component (not empty, ".", ".." and without separators or
    NUL); else a FormatError naming the manifest and `what` (e.g. "shard name").

    Args:
        name: the name read from the manifest (or a zarr store's metadata).
        what: what the name is, for the message.
        manifest: the file (or store) it was read from.
        folder: what the name must stay inside, for the message.
        fix: what the user can do, ending the message.
    """
    if not isinstance(name, str) or name in ("", ".", "..") or \
            any(c in name for c in ("/", "\\", "\0")):
        raise FormatError(f"{manifest}: {what} {name!r} is not a plain name inside the {folder} "
                          f"(no '/', '..' or absolute paths); {fix}")
    return name


class LeadsOutside(FormatError):
    """A file resolving outside its dataset or store: refused outright, never skipped and
    counted like a corrupt sample."""


class Confined:
    """A folder (a dataset, a zarr store) whose files are used only when they resolve inside
    it. The folder is resolved once; `check` resolves one path, `open` none where the kernel
    can refuse a way out itself.

    Attributes:
        root: the folder as given. real: its resolved path.
    """

    def __init__(self, root: str | Path, folder: str = "dataset folder"):
        self.root = Path(root)
        self.folder = folder
        self.real = os.path.realpath(root)
        self._prefix = self.real.rstrip(os.sep) + os.sep
        self._fd: int | None = None  # the folder, opened on first `open` (kept across fork)
        self._open_under = None  # openat2 bound to it, where available

    def check(self, path: str | Path, what: str) -> Path:
        """`path` after checking that it resolves (symlinks followed) inside the folder."""
        real = os.path.realpath(path)
        if real != self.real and not real.startswith(self._prefix):
            owner = self.folder.split()[-1]
            raise LeadsOutside(f"{path}: {what} leads outside the {self.folder} {self.root} (to "
                              f"{real}); a {owner} must hold its own files: copy them in "
                              "instead of linking")
        return Path(path)

    def dir_fd(self) -> int:
        """A descriptor of the folder, open while this object lives."""
        if self._fd is None:
            self._fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) |
                               getattr(os, "O_CLOEXEC", 0))
            weakref.finalize(self, os.close, self._fd)
        return self._fd

    def open(self, relative: str, what: str) -> int:
        """A read-only descriptor of the regular file `relative` (to the folder);
        FileNotFoundError when absent, FormatError when it resolves outside or is not a
        regular file (a FIFO would block its reader forever, a folder or a device is no
        chunk: opened without blocking, then checked; a symlink loop is no file either)."""
        try:
            fd = self._open(relative, what)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise _not_regular(self.root / relative, what, "a symlink loop") from None
        return _regular(fd, self.root / relative, what)

    def _open(self, relative: str, what: str) -> int:
        if self._open_under is None and _open_beneath.available():
            self._open_under = _open_beneath.opener(self.dir_fd())
        if self._open_under is not None:
            try:
                return self._open_under(relative.encode())
            except UnicodeEncodeError:
                pass  # a name that is not UTF-8 (os.fsencode would escape it): checked below
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                # out, or through an absolute symlink that may lead back in: decide below
        path = self.root / relative
        self.check(path, what)
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) |
                       getattr(os, "O_NONBLOCK", 0))


class NotRegular(FormatError):
    """A path that must be a regular file (a chunk, a metadata document) is a FIFO, a folder,
    a device or a socket."""


def _regular(fd: int, path: Path, what: str) -> int:
    """`fd` when it is a regular file; else closed, and NotRegular naming `path`."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, what, kind_of(mode))
    return fd


def _not_regular(path, what: str, kind: str) -> NotRegular:
    """The error for `path` (`what` it was read as) being `kind` ("a FIFO", "a symlink loop")
    instead of a regular file."""
    return NotRegular(f"{path}: {what} is {kind}, not a regular file; replace it with the file "
                      "it stands for")


def kind_of(mode: int) -> str:
    """What a non-regular file is, for messages."""
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or
            stat.S_ISBLK(mode) else "not a file")


def check_regular(path: str | Path, what: str) -> Path:
    """`path` when it is absent or a regular file (symlinks followed), without opening it;
    else NotRegular naming it. For files read by others (zarr's store)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return Path(path)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise _not_regular(path, what, "a symlink loop") from None
    if not stat.S_ISREG(mode):
        raise _not_regular(path, what, kind_of(mode))
    return Path(path)


def inside(root: Path, *parts: str, what: str) -> Path:
    """`root / parts...` after checking that it resolves (symlinks followed) inside `root`."""
    return Confined(root).check(Path(root).joinpath(*parts), what)
