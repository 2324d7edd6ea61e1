"""Build a C shim of chute's (`chute/fallbacks/_native/*.c`) once per machine.

The library goes to the `native/` folder of chute's cache directory, under a name keyed by
its source and flags, so DDP ranks and workers that race to build it end up with the same
file (compiled to a temporary name, then renamed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from chute._cache_dir import cache_dir
from chute.errors import BackendUnavailableError

__all__ = ["build_library"]

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
    compiler = _compiler()
    if compiler is None:
        raise BackendUnavailableError(
            f"{what} needs a C compiler to be built once (none of $CC, cc, gcc, clang is on "
            f"PATH); install one (Debian/Ubuntu: `apt-get install gcc`), or {otherwise}")
    key = hashlib.sha256(source.read_bytes() + repr((_CFLAGS, libs)).encode()).hexdigest()
    target = cache_dir() / "native" / f"{source.stem}-{key[:16]}.so"
    if target.is_file():
        return target
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
