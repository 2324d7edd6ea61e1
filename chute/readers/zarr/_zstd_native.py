"""zstd frames decompressed straight into a destination buffer by libzstd's one-shot
`ZSTD_decompressDCtx`, called through ctypes (which releases the GIL for the call) with
decompression contexts reused across threads (docs/design.md, "Zarr groups").

Why not python-zstandard: its one-shot `decompress` returns a new bytes object (a fresh large
allocation, then a copy into the batch), and its stream reader decodes through an internal
window buffer; both ran at about half the speed of the one-shot call into the batch. The
library is the libzstd that numcodecs (zarr's codec package) or python-zstandard already
loaded -- both export zstd's functions -- else the system's `libzstd`. `decoder()` is None when
none of them offers the functions, and callers keep python-zstandard.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util

import numpy as np

from chute._fork import ProcessLock, ReusePool

__all__ = ["ZstdDecoder", "decoder"]

_lock = ProcessLock()  # free again in a forked child
_decoder: tuple[bool, ZstdDecoder | None] = (False, None)


def _candidates() -> list[str]:
    """Files that may export libzstd's functions: the extension modules are located, not
    imported (python-zstandard's `_cffi` would need cffi to import)."""
    found = []
    for module in ("numcodecs.zstd", "zstandard._cffi"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):  # the package is absent
            continue
        if spec is not None and spec.origin:
            found.append(spec.origin)
    system = ctypes.util.find_library("zstd")
    if system:
        found.append(system)
    return found


class ZstdDecoder:
    """`decode(src, dest)`: the zstd frame in `src` (a writable buffer: bytearray or NumPy)
    decompressed into `dest` (a C-contiguous NumPy array); returns the bytes written, or raises
    ValueError naming zstd's error when the frame is corrupt or does not fit `dest`.

    Attributes:
        library: the file the functions come from; lib: it, loaded.
    """

    def __init__(self, lib: ctypes.CDLL, library: str):
        self.library = library
        self.lib = lib
        self._create = lib.ZSTD_createDCtx
        self._create.restype = ctypes.c_void_p
        self._create.argtypes = []
        self._decompress = lib.ZSTD_decompressDCtx
        self._decompress.restype = ctypes.c_size_t
        self._decompress.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.c_size_t]
        self._is_error = lib.ZSTD_isError
        self._is_error.restype = ctypes.c_uint
        self._is_error.argtypes = [ctypes.c_size_t]
        self._error_name = lib.ZSTD_getErrorName
        self._error_name.restype = ctypes.c_char_p
        self._error_name.argtypes = [ctypes.c_size_t]

        self._free = lib.ZSTD_freeDCtx
        self._free.restype = ctypes.c_size_t
        self._free.argtypes = [ctypes.c_void_p]
        # contexts (~100 KB each) lent per call: one per thread would stay allocated after its
        # thread ended (a raw pointer has no finalizer)
        self._contexts = ReusePool(self._new_context, self._free)

    def _new_context(self) -> int:
        dctx = self._create()
        if not dctx:
            raise MemoryError("ZSTD_createDCtx failed")
        return dctx

    def decode(self, src, size: int, dest: np.ndarray) -> int:
        """Decompress the first `size` bytes of `src` into `dest`."""
        source = np.frombuffer(src, np.uint8, count=size)
        with self._contexts.lease() as dctx:
            written = self._decompress(dctx, dest.ctypes.data, dest.nbytes,
                                       source.ctypes.data, size)
        if self._is_error(written):
            raise ValueError(f"zstd: {self._error_name(written).decode()}")
        return int(written)


def _load() -> ZstdDecoder | None:
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.ZSTD_decompressDCtx, lib.ZSTD_createDCtx, lib.ZSTD_isError  # noqa: B018
            lib.ZSTD_getErrorName, lib.ZSTD_freeDCtx  # noqa: B018
        except (OSError, AttributeError):
            continue
        return ZstdDecoder(lib, path)
    return None


def decoder() -> ZstdDecoder | None:
    """The process's libzstd decoder (None: no library exports the functions)."""
    global _decoder
    if not _decoder[0]:
        with _lock:
            if not _decoder[0]:
                _decoder = (True, _load())
    return _decoder[1]
