"""Reading frames with libsndfile's own `sf_readf_float` on an open `soundfile.SoundFile`.

soundfile seeks to its new position after every read; at the end of a FLAC whose header leaves
its length out (written as a stream: total samples 0, which libsndfile reports as
`UNKNOWN_FRAMES`) that seek fails, so soundfile's reads cannot reach such a file's last frame.
Reading through libsndfile directly has no such seek (docs/design.md, "Audio").
"""

from __future__ import annotations

import numpy as np

__all__ = ["UNKNOWN_FRAMES", "read_frames"]

UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's SF_COUNT_MAX: the header does not give the length


def read_frames(sf, f, out: np.ndarray) -> int:
    """Read up to `len(out)` frames from `f`'s position into `out`; returns how many were read
    (fewer at the end of the file).

    Args:
        sf: the soundfile module.
        f: an open `sf.SoundFile` for reading.
        out: float32 [frames, f.channels], C-contiguous.

    Raises:
        sf.LibsndfileError: libsndfile reported a decoding error (a corrupt frame).
    """
    channels = out.shape[1]
    base = sf._ffi.cast("float *", out.ctypes.data)
    done = 0
    while done < len(out):
        n = sf._snd.sf_readf_float(f._file, base + done * channels, len(out) - done)
        code = sf._snd.sf_error(f._file)
        if code:
            raise sf.LibsndfileError(code)
        if n <= 0:
            break
        done += n
    return done
