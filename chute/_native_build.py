"""Build a C shim of chute's (`chute/fallbacks/_native/*.c`, `chute/readers/zarr/_native/*.c`) once
per machine.

The library goes to the `native/` folder of chute's cache directory, under a name keyed by
its source and flags, so DDP ranks and workers that race to build it end up with the same
file (compiled to a temporary name, then renamed).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chute._cache_dir import cache_dir
from chute._fork import ProcessLock
from chute.errors import BackendUnavailableError

__all__ = ["build_library", "load_function", "NativeShim", "ShimStatus"]

_CFLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=default")


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build_library(source: Path, libs: tuple[str, ...], what: str, otherwise: str) -> Path:
    """The shared library built from `source` (building it if this machine has not yet).

    Args:
        source: the C file.
        libs: linker arguments (e.g. ("-ljpeg",)).
        what: how errors name the shim ("chute's audio segment decoder").
        otherwise: what the user can do instead, ending the error messages.

    Raises:
        BackendUnavailableError: no compiler, the build failed, or the cache is not writable.
    """
    key = hashlib.sha256(source.read_bytes() + repr((_CFLAGS, libs)).encode()).hexdigest()
    target = cache_dir() / "native" / f"{source.stem}-{key[:16]}.so"
    if target.is_file():  # built here before, or prebuilt and carried (./dev.sh gpu-bundle)
        return target
    compiler = _compiler()
    if compiler is None:
        raise BackendUnavailableError(
            f"{what} needs a C compiler to be built once (none of $CC, cc, gcc, clang is on "
            f"PATH); install one (Debian/Ubuntu: `apt-get install gcc`), or {otherwise}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp",
                                         dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise BackendUnavailableError(
            f"cannot write {what} to {target.parent} ({exc}); set CHUTE_CACHE_DIR to a "
            f"writable directory, or {otherwise}") from exc
    try:
        command = [compiler, *_CFLAGS, "-o", temporary, str(source), *libs]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.SubprocessError as exc:  # the compiler hung
            raise BackendUnavailableError(f"building {what} failed ({exc}); {otherwise}") \
                from exc
        if result.returncode != 0:
            words = (result.stderr or result.stdout).strip().splitlines()[-6:]
            raise BackendUnavailableError(
                f"building {what} failed (`{' '.join(command)}`):\n  " + "\n  ".join(words)
                + f"\n{otherwise}")
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def load_function(source: Path, symbol: str, restype, argtypes: list, what: str,
                  otherwise: str) -> tuple[str, object]:
    """(library path, ctypes function `symbol` with its types) of the shim built from `source`
    with no extra libraries.

    Args:
        source: the C file.
        symbol: the exported function.
        restype, argtypes: its ctypes types.
        what, otherwise: as for `build_library`.

    Raises:
        BackendUnavailableError: the shim could not be built or loaded.
    """
    path = build_library(source, (), what, otherwise)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise BackendUnavailableError(f"{path} could not be loaded ({exc}); delete it to "
                                      "rebuild") from exc
    function = getattr(lib, symbol)
    function.restype = restype
    function.argtypes = argtypes
    return str(path), function


@dataclass(frozen=True)
class ShimStatus:
    """Whether a native shim is in use (else its module's Python path), and why not."""

    available: bool
    library: str | None
    reason: str | None


class NativeShim:
    """A shim loaded on first use, once per process: `status()` never raises; after it says
    available, `loaded` holds what `load` returned next to the library path.

    Args:
        load: () -> (library path, what the module calls), raising one of `errors`.
        errors: the exceptions that mean "unavailable" (anything else is a bug and propagates).
    """

    def __init__(self, load: Callable[[], tuple[str, Any]],
                 errors: tuple[type[BaseException], ...] = (BackendUnavailableError,)) -> None:
        self._load = load
        self._errors = errors
        self._lock = ProcessLock()  # free again in a forked child
        self._status: ShimStatus | None = None
        self.loaded: Any = None  # each module's own (a CDLL, a (function, api) pair, ...)

    def status(self) -> ShimStatus:
        with self._lock:
            if self._status is None:
                try:
                    path, self.loaded = self._load()
                    self._status = ShimStatus(True, path, None)
                except self._errors as exc:
                    self._status = ShimStatus(False, None, str(exc))
            return self._status
