"""libjpeg-turbo's TurboJPEG 2 API: locating the library and declaring the calls Numba makes.

The decompress calls are declared as Numba `ExternalFunction`s, resolved by symbol name when
the jitted code is linked. Unlike ctypes function objects (whose addresses get baked into the
machine code), this keeps `cache=True` working. The library must be loaded into the process
(`load()`) before a jitted function that uses them is compiled or loaded from the cache.

Pointers are declared as 64-bit integers: on the 64-bit platforms Numba supports they are
passed exactly like `void *`, and NumPy gives addresses as integers (`arr.ctypes.data`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import numpy as np
from numba import types

from chute._fork import ProcessLock
from chute.errors import BackendUnavailableError

__all__ = [
    "turbojpeg_library",
    "load",
    "create_handles",
    "destroy_handles",
    "tj_decompress_header3",
    "tj_decompress2",
    "tj_get_error_code",
    "tj_init_decompress",
    "tj_destroy",
    "TJFLAG_STOPONWARNING",
    "TJPF_RGB",
    "TJPF_CMYK",
    "TJCS_CMYK",
    "TJCS_YCCK",
    "TJFLAG_FASTDCT",
]

# Constants of turbojpeg.h (TurboJPEG 2 API).
TJPF_RGB = 0
TJPF_CMYK = 11
TJCS_CMYK = 3
TJCS_YCCK = 4
TJFLAG_FASTDCT = 2048
TJFLAG_STOPONWARNING = 8192

_SONAME = "libturbojpeg.so.0"
_SEARCH_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/opt/libjpeg-turbo/lib64",
    "/opt/libjpeg-turbo/lib",
)

_i32, _i64, _u64 = types.int32, types.int64, types.uint64
# int tjDecompressHeader3(tjhandle, const unsigned char *jpegBuf, unsigned long jpegSize,
#                         int *width, int *height, int *jpegSubsamp, int *jpegColorspace)
tj_decompress_header3 = types.ExternalFunction(
    "tjDecompressHeader3", _i32(_i64, _i64, _u64, _i64, _i64, _i64, _i64)
)
# int tjDecompress2(tjhandle, const unsigned char *jpegBuf, unsigned long jpegSize,
#                   unsigned char *dstBuf, int width, int pitch, int height, int pixelFormat,
#                   int flags)
tj_decompress2 = types.ExternalFunction(
    "tjDecompress2", _i32(_i64, _i64, _u64, _i64, _i32, _i32, _i32, _i32, _i32)
)
# int tjGetErrorCode(tjhandle): TJERR_WARNING = 0, TJERR_FATAL = 1
tj_get_error_code = types.ExternalFunction("tjGetErrorCode", _i32(_i64))
# A handle whose last call failed can stay in a bad libjpeg state ("Improper call to JPEG
# library in state ..."), failing every later image: jitted code replaces it with these.
tj_init_decompress = types.ExternalFunction("tjInitDecompress", _i64())
tj_destroy = types.ExternalFunction("tjDestroy", _i32(_i64))

_lock = ProcessLock()
_loaded: dict[str, ctypes.CDLL] = {}


def turbojpeg_library(path: str | os.PathLike | None = None) -> str:
    """The path of the TurboJPEG shared library chute will use.

    Order: `path` if given, else the environment variable CHUTE_TURBOJPEG, else the system's
    libturbojpeg.so.0 (common library directories, then the dynamic linker's find_library).
    Raises BackendUnavailableError naming what was tried when nothing is found.
    """
    explicit = path if path is not None else os.environ.get("CHUTE_TURBOJPEG")
    if explicit:
        candidate = Path(explicit)
        if not candidate.is_file():
            source = "argument" if path is not None else "CHUTE_TURBOJPEG"
            raise BackendUnavailableError(
                f"TurboJPEG library {str(candidate)!r} (from {source}) does not exist; point it "
                f"at libturbojpeg.so.0 or unset it to use the system library"
            )
        return str(candidate)
    for directory in _SEARCH_DIRS:
        candidate = Path(directory) / _SONAME
        if candidate.is_file():
            return str(candidate)
    found = ctypes.util.find_library("turbojpeg")
    if found:
        return found
    raise BackendUnavailableError(
        f"{_SONAME} (libjpeg-turbo's TurboJPEG library) was not found in the dynamic linker "
        f"path nor in {', '.join(_SEARCH_DIRS)}; install it (Debian/Ubuntu: "
        f"`apt-get install libturbojpeg0`, Fedora: `dnf install turbojpeg`, conda: "
        f"`conda install libjpeg-turbo`) or set CHUTE_TURBOJPEG to its path"
    )


def load(path: str | os.PathLike | None = None) -> ctypes.CDLL:
    """Load the library once per process (also for Numba's linker) and return its ctypes handle."""
    resolved = turbojpeg_library(path)
    with _lock:
        lib = _loaded.get(resolved)
        if lib is not None:
            return lib
        from llvmlite import binding

        try:
            lib = ctypes.CDLL(resolved)
            binding.load_library_permanently(resolved)
        except OSError as exc:
            raise BackendUnavailableError(
                f"TurboJPEG library {resolved!r} could not be loaded ({exc}); reinstall "
                f"libjpeg-turbo or set CHUTE_TURBOJPEG to a working libturbojpeg.so.0"
            ) from exc
        missing = [
            name
            for name in ("tjInitDecompress", "tjDecompressHeader3", "tjDecompress2",
                         "tjGetErrorCode", "tjDestroy", "tjGetErrorStr2")
            if not hasattr(lib, name)
        ]
        if missing:
            raise BackendUnavailableError(
                f"{resolved!r} lacks {', '.join(missing)}: chute needs libjpeg-turbo >= 2.0's "
                f"TurboJPEG API; install a newer libjpeg-turbo or set CHUTE_TURBOJPEG"
            )
        lib.tjInitDecompress.restype = ctypes.c_void_p
        lib.tjInitDecompress.argtypes = []
        lib.tjDestroy.restype = ctypes.c_int
        lib.tjDestroy.argtypes = [ctypes.c_void_p]
        lib.tjGetErrorStr2.restype = ctypes.c_char_p
        lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
        _loaded[resolved] = lib
        return lib


def create_handles(lib: ctypes.CDLL, count: int) -> np.ndarray:
    """`count` decompressor handles as an int64 array of addresses (one per Numba thread)."""
    handles = np.zeros(count, dtype=np.int64)
    for i in range(count):
        handle = lib.tjInitDecompress()
        if not handle:
            destroy_handles(lib, handles[:i])
            raise BackendUnavailableError(
                f"tjInitDecompress failed: {lib.tjGetErrorStr2(None)!r} (out of memory?)"
            )
        handles[i] = handle
    return handles


def destroy_handles(lib: ctypes.CDLL, handles: np.ndarray) -> None:
    for handle in handles:
        if handle:
            lib.tjDestroy(ctypes.c_void_p(int(handle)))
