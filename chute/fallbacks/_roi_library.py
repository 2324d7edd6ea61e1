"""The region-of-interest JPEG decoder (`_native/roi_jpeg.c`): built on first use, then loaded.

The shim is compiled once per machine with the system C compiler against libjpeg-turbo's
libjpeg API (`cc -shared ... -ljpeg`) by `chute/_native_build.py`, into chute's cache directory.

Jitted code calls chute_roi_decode through a Numba `ExternalFunction` resolved by symbol
name, which keeps `cache=True` working. The symbol is registered with LLVM before any kernel
that names it is compiled: the real function when the build succeeded, otherwise a stand-in
that reports "unavailable" (never called: decode_batch then decodes full frames, and says so).
Decoders are created and destroyed from Python through ctypes.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
from numba import types

from chute._native_build import NativeShim, ShimStatus, build_library
from chute.errors import BackendUnavailableError

__all__ = [
    "RoiDecoderStatus",
    "roi_decoder_status",
    "create_roi_handles",
    "roi_decode",
    "ROI_OK",
    "ROI_WARNING",
    "ROI_FLAG_FASTDCT",
    "GEOMETRY_FIELDS",
]

# Return codes and flags of chute_roi_decode (see roi_jpeg.c); other codes mean "rejected".
ROI_OK = 0
ROI_WARNING = 1
ROI_UNAVAILABLE = 99
ROI_FLAG_FASTDCT = 1
GEOMETRY_FIELDS = 3  # left, width, channels of the decoded region

_SOURCE = Path(__file__).parent / "_native" / "roi_jpeg.c"
_LIBS = ("-ljpeg",)

_i32, _i64, _u64 = types.int32, types.int64, types.uint64
# int chute_roi_decode(void *h, const uint8_t *data, uint64_t size, int32_t scale_denom,
#                      int32_t y0, int32_t y1, int32_t x0, int32_t x1, uint8_t *dst,
#                      uint64_t dst_capacity, int32_t flags, int32_t *geometry)
roi_decode = types.ExternalFunction(
    "chute_roi_decode",
    _i32(_i64, _i64, _u64, _i32, _i32, _i32, _i32, _i32, _i64, _u64, _i32, _i64),
)


# whether decode_batch can decode only the crop's region of each JPEG
RoiDecoderStatus = ShimStatus

_keep: list = []  # ctypes objects whose addresses LLVM holds


def _library_path() -> Path:
    """The built shim, building it if this machine has not yet."""
    return build_library(_SOURCE, _LIBS, "chute's ROI JPEG decoder",
                         "install libjpeg-turbo's headers (Debian/Ubuntu: `apt-get install "
                         "gcc libjpeg-dev`), or pass roi_decode=False")


def _register(lib: ctypes.CDLL | None) -> None:
    """Point the symbol the kernels name at the shim, or at a stand-in."""
    from llvmlite import binding

    function = lib.chute_roi_decode if lib is not None else ctypes.CFUNCTYPE(
        ctypes.c_int32, *([ctypes.c_int64] * 12))(lambda *args: ROI_UNAVAILABLE)
    _keep.append(function)
    binding.add_symbol("chute_roi_decode", ctypes.cast(function, ctypes.c_void_p).value)


def _load(path: Path) -> ctypes.CDLL:
    """Load the shim and check that it can create a decoder."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise BackendUnavailableError(
            f"chute's ROI JPEG decoder {path} could not be loaded ({exc}); delete it to "
            f"rebuild, or pass roi_decode=False"
        ) from exc
    lib.chute_roi_create.restype = ctypes.c_void_p
    lib.chute_roi_create.argtypes = []
    lib.chute_roi_destroy.argtypes = [ctypes.c_void_p]
    probe = lib.chute_roi_create()
    if not probe:
        raise BackendUnavailableError(
            f"chute's ROI JPEG decoder {path} failed to create a decoder: the libjpeg it "
            f"loaded does not match the headers it was built with; delete it to rebuild, or "
            f"pass roi_decode=False"
        )
    lib.chute_roi_destroy(probe)
    return lib


def _load_and_register() -> tuple[str, ctypes.CDLL]:
    """(path, loaded shim); the symbol is registered either way (the stand-in on failure)."""
    try:
        path = _library_path()
        lib = _load(path)
    except BackendUnavailableError:
        _register(None)
        raise
    _register(lib)
    return str(path), lib


_shim = NativeShim(_load_and_register)  # loaded: the ctypes.CDLL


def roi_decoder_status() -> ShimStatus:
    """Whether the ROI decoder works here: builds it (once per machine) and loads it (once per
    process) on the first call; never raises.

    Runs before a kernel naming chute_roi_decode is compiled or loaded from cache.
    """
    return _shim.status()


def create_roi_handles(count: int) -> np.ndarray:
    """`count` decoders as int64 addresses (one per Numba thread); empty when unavailable."""
    if not roi_decoder_status().available:
        return np.zeros(0, dtype=np.int64)
    handles = np.zeros(count, dtype=np.int64)
    for i in range(count):
        handle = _shim.loaded.chute_roi_create()
        if not handle:
            raise BackendUnavailableError("chute_roi_create failed (out of memory?)")
        handles[i] = handle
    return handles
