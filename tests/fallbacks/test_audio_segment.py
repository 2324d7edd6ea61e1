"""The one-call audio segment decoder (chute/fallbacks/_audio_segment.py): exact frames for
WAV and FLAC, mono and stereo, at every edge, and an error code (never a slice) for bytes that
do not hold what the caller says."""

from __future__ import annotations

import io

import numpy as np
import pytest

from chute.fallbacks._audio_segment import SEGMENT_ERRORS, decode_segment, segment_decoder_status
from tests._audio import RECORDINGS, pcm_of

sf = pytest.importorskip("soundfile")


@pytest.fixture(scope="module", autouse=True)
def native():
    status = segment_decoder_status()
    if not status.available:
        pytest.skip(f"native segment decoder unavailable: {status.reason}")


def _encoded(name: str) -> np.ndarray:
    fmt, rate, _, _ = RECORDINGS[name]
    buffer = io.BytesIO()
    sf.write(buffer, pcm_of(name), rate, format=fmt, subtype="PCM_16")
    return np.frombuffer(buffer.getvalue(), np.uint8)


@pytest.mark.parametrize("name", list(RECORDINGS))
def test_segments_equal_soundfile(name):
    _, rate, channels, _ = RECORDINGS[name]
    data = _encoded(name)
    total = len(pcm_of(name))
    for start, stop in [(0, total), (0, 1), (total - 1, total), (123, 4567 % total + 124),
                        (total // 2, total), (17, 17)]:
        got = decode_segment(data, start, stop - start, rate, channels)
        want = sf.read(io.BytesIO(data.tobytes()), start=start, stop=stop, dtype="float32",
                       always_2d=True)[0]
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_wrong_claims_and_bad_bytes_are_error_codes():
    data = _encoded("b.flac")
    _, rate, channels, _ = RECORDINGS["b.flac"]
    total = len(pcm_of("b.flac"))
    assert decode_segment(data, 0, 10, rate + 1, channels) == 2
    assert decode_segment(data, 0, 10, rate, channels + 1) == 3
    assert decode_segment(data, total - 5, 10, rate, channels) == 4
    assert decode_segment(data, -1, 10, rate, channels) == 4
    assert decode_segment(np.frombuffer(b"not audio at all" * 10, np.uint8), 0, 10, rate,
                          channels) == 1
    truncated = data[:len(data) // 2]
    assert decode_segment(truncated, total // 2 - 100, total // 2, rate, channels) in (4, 5, 6)
    assert set(SEGMENT_ERRORS) == {1, 2, 3, 4, 5, 6}
