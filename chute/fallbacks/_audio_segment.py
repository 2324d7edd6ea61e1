"""Audio segments decoded from bytes in memory by libsndfile in one foreign call
(`_native/sf_segment.c`), so decoding threads run in parallel (docs/design.md, "Audio").

The shim is built once per machine (`chute/_native_build.py`) and called through ctypes, which
releases the GIL for the call; libsndfile's functions are the ones soundfile loaded. Where the
shim cannot be built, `segment_decoder_status()` says why and the audio producer decodes
through soundfile's Python file objects instead (same frames, slower with threads).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from chute._native_build import NativeShim, ShimStatus, load_function
from chute.errors import BackendUnavailableError

__all__ = ["SegmentDecoderStatus", "segment_decoder_status", "decode_segment", "SEGMENT_ERRORS"]

_SOURCE = Path(__file__).parent / "_native" / "sf_segment.c"

# chute_sf_segment's return codes (sf_segment.c) -> what went wrong
SEGMENT_ERRORS = {
    1: "libsndfile cannot open the bytes",
    2: "the file's sample rate is not the dataset's",
    3: "the file's channel count is not the dataset's",
    4: "the segment ends past the file's last frame",
    5: "seeking to the segment's first frame failed",
    6: "a corrupt or truncated frame ended the read early",
}


class _Api(ctypes.Structure):
    _fields_ = [("open_virtual", ctypes.c_void_p), ("seek", ctypes.c_void_p),
                ("readf_float", ctypes.c_void_p), ("close", ctypes.c_void_p)]


# whether segments decode in one foreign call (else through soundfile's file objects)
SegmentDecoderStatus = ShimStatus


def _load() -> tuple:
    import soundfile

    ffi, snd = soundfile._ffi, soundfile._snd

    def address(name: str) -> int:
        return int(ffi.cast("uintptr_t", ffi.addressof(snd, name)))

    api = _Api(address("sf_open_virtual"), address("sf_seek"), address("sf_readf_float"),
               address("sf_close"))
    path, function = load_function(
        _SOURCE, "chute_sf_segment", ctypes.c_int,
        [ctypes.POINTER(_Api), ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p],
        "chute's audio segment decoder",
        "audio decodes through soundfile's Python file objects (slower)")
    return path, (function, api)


# loaded: (function, api struct)
_shim = NativeShim(_load, (BackendUnavailableError, AttributeError, ImportError))


def segment_decoder_status() -> ShimStatus:
    """Builds (once per machine) and loads (once per process) the shim on the first call;
    never raises."""
    return _shim.status()


def decode_segment(data: np.ndarray, start: int, frames: int, rate: int,
                   channels: int) -> np.ndarray | int:
    """Frames [start, start + frames) of the audio file in `data` as float32 [frames, channels],
    or an error code of SEGMENT_ERRORS. Call `segment_decoder_status()` first.

    Args:
        data: the file's bytes (uint8, C-contiguous; a zero-copy view of the shard is fine).
        start, frames: the segment, in frames at the file's own rate.
        rate, channels: what the dataset's columns say the file holds; a file that disagrees
            is an error, never a wrong slice.
    """
    function, api = _shim.loaded
    out = np.empty((max(frames, 0), channels), np.float32)
    data = np.ascontiguousarray(data, np.uint8)
    code = function(ctypes.byref(api), data.ctypes.data, data.size, start, frames, rate,
                    channels, out.ctypes.data)
    return out if code == 0 else int(code)
