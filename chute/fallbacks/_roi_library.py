"""The region-of-interest JPEG decoder (`_native/roi_jpeg.c`): built on first use, then loaded.

The shim is compiled once per machine with the system C compiler against libjpeg-turbo's
libjpeg API (`cc -shared ... -ljpeg`) into the `native/` folder of chute's cache directory
(CHUTE_CACHE_DIR, else XDG_CACHE_HOME/chute, else ~/.cache/chute), under a name keyed by its
source and flags, so DDP ranks and workers that race to build it all end up with the same file
(written to a temporary name, then renamed).

Jitted code calls it through Numba `ExternalFunction`s resolved by symbol name, which keeps
`cache=True` working. The symbols are registered with LLVM before any kernel that names them
is compiled: the real functions when the build succeeded, otherwise stand-ins that report
"unavailable" (they are never called: decode_batch then decodes full frames, and says so).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import types

from chute._cache_dir import cache_dir
from chute.errors import BackendUnavailableError

__all__ = [
    "RoiDecoderStatus",
    "roi_decoder_status",
    "ensure_loaded",
    "create_roi_handles",
    "roi_decode",
    "ROI_OK",
    "ROI_WARNING",
    "ROI_FATAL",
    "ROI_FLAG_FASTDCT",
    "GEOMETRY_FIELDS",
]

# Return codes and flags of chute_roi_decode (see roi_jpeg.c).
ROI_OK = 0
ROI_WARNING = 1
ROI_FATAL = 2
ROI_UNAVAILABLE = 99
ROI_FLAG_FASTDCT = 1
GEOMETRY_FIELDS = 3  # left, width, channels of the decoded region

_SOURCE = Path(__file__).parent / "_native" / "roi_jpeg.c"
_CFLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=default")
_LIBS = ("-ljpeg",)

_i32, _i64, _u64 = types.int32, types.int64, types.uint64
roi_create = types.ExternalFunction("chute_roi_create", _i64())
roi_destroy = types.ExternalFunction("chute_roi_destroy", types.void(_i64))
# int chute_roi_decode(void *h, const uint8_t *data, uint64_t size, int32_t scale_denom,
#                      int32_t y0, int32_t y1, int32_t x0, int32_t x1, uint8_t *dst,
#                      uint64_t dst_capacity, int32_t flags, int32_t *geometry)
roi_decode = types.ExternalFunction(
    "chute_roi_decode",
    _i32(_i64, _i64, _u64, _i32, _i32, _i32, _i32, _i32, _i64, _u64, _i32, _i64),
)


@dataclass(frozen=True)
class RoiDecoderStatus:
    """Whether decode_batch can decode only the crop's region of each JPEG."""

    available: bool
    library: str | None  # path of the built shim when available
    reason: str | None  # why not, and what to do, when unavailable


_lock = threading.Lock()
_status: RoiDecoderStatus | None = None
_keep: list = []  # ctypes objects whose addresses LLVM holds


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _build(target: Path, compiler: str) -> None:
    """Compile the shim to `target` atomically; raise BackendUnavailableError with cc's words."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        command = [compiler, *_CFLAGS, "-o", temporary, str(_SOURCE), *_LIBS]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            words = (result.stderr or result.stdout).strip().splitlines()[-6:]
            raise BackendUnavailableError(
                f"building chute's ROI JPEG decoder failed (`{' '.join(command)}`):\n  "
                + "\n  ".join(words)
                + "\ninstall a C compiler and libjpeg-turbo's headers (Debian/Ubuntu: "
                "`apt-get install gcc libjpeg-dev`), or pass roi_decode=False"
            )
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _library_path() -> Path:
    """The built shim, building it if this machine has not yet."""
    compiler = _compiler()
    if compiler is None:
        raise BackendUnavailableError(
            "chute's ROI JPEG decoder needs a C compiler to be built once (none of $CC, cc, "
            "gcc, clang is on PATH); install one and libjpeg-turbo's headers (Debian/Ubuntu: "
            "`apt-get install gcc libjpeg-dev`), or pass roi_decode=False"
        )
    key = hashlib.sha256(_SOURCE.read_bytes() + repr((_CFLAGS, _LIBS)).encode()).hexdigest()
    target = cache_dir() / "native" / f"roi_jpeg-{key[:16]}.so"
    if not target.is_file():
        try:
            _build(target, compiler)
        except subprocess.SubprocessError as exc:  # the compiler hung
            raise BackendUnavailableError(
                f"building chute's ROI JPEG decoder failed ({exc}); pass roi_decode=False"
            ) from exc
        except OSError as exc:
            raise BackendUnavailableError(
                f"cannot write chute's ROI JPEG decoder to {target.parent} ({exc}); set "
                f"CHUTE_CACHE_DIR to a writable directory, or pass roi_decode=False"
            ) from exc
    return target


def _register(lib: ctypes.CDLL | None) -> None:
    """Point the three symbols the kernels name at the shim, or at stand-ins."""
    from llvmlite import binding

    if lib is not None:
        functions = {name: getattr(lib, name)
                     for name in ("chute_roi_create", "chute_roi_destroy", "chute_roi_decode")}
    else:
        functions = {
            "chute_roi_create": ctypes.CFUNCTYPE(ctypes.c_int64)(lambda: 0),
            "chute_roi_destroy": ctypes.CFUNCTYPE(None, ctypes.c_int64)(lambda h: None),
            "chute_roi_decode": ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_int64] * 12))(
                lambda *args: ROI_UNAVAILABLE),
        }
    for name, function in functions.items():
        _keep.append(function)
        binding.add_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)


def ensure_loaded() -> RoiDecoderStatus:
    """Build (once per machine) and load the shim (once per process); never raises.

    Must run before a kernel naming the roi_* functions is compiled or loaded from cache.
    """
    global _status
    with _lock:
        if _status is not None:
            return _status
        try:
            path = _library_path()
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:
                raise BackendUnavailableError(
                    f"chute's ROI JPEG decoder {path} could not be loaded ({exc}); delete it "
                    f"to rebuild, or pass roi_decode=False"
                ) from exc
            lib.chute_roi_create.restype = ctypes.c_void_p
            lib.chute_roi_create.argtypes = []
            probe = lib.chute_roi_create()
            if not probe:
                raise BackendUnavailableError(
                    f"chute's ROI JPEG decoder {path} failed to create a decoder: the libjpeg "
                    f"it loaded does not match the headers it was built with; delete it to "
                    f"rebuild, or pass roi_decode=False"
                )
            lib.chute_roi_destroy.argtypes = [ctypes.c_void_p]
            lib.chute_roi_destroy(probe)
            _register(lib)
            _status = RoiDecoderStatus(True, str(path), None)
        except BackendUnavailableError as exc:
            _register(None)
            _status = RoiDecoderStatus(False, None, str(exc))
        return _status


def roi_decoder_status() -> RoiDecoderStatus:
    """Whether the ROI decoder works on this machine (builds it on first call if needed)."""
    return ensure_loaded()


def create_roi_handles(count: int) -> np.ndarray:
    """`count` decoders as int64 addresses (one per Numba thread); empty when unavailable."""
    status = ensure_loaded()
    if not status.available:
        return np.zeros(0, dtype=np.int64)
    lib = ctypes.CDLL(status.library)
    lib.chute_roi_create.restype = ctypes.c_void_p
    handles = np.zeros(count, dtype=np.int64)
    for i in range(count):
        handle = lib.chute_roi_create()
        if not handle:
            raise BackendUnavailableError("chute_roi_create failed (out of memory?)")
        handles[i] = handle
    return handles
