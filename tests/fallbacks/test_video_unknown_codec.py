"""A stored container whose video codec FFmpeg cannot decode (a corrupt codec tag) is a
DecodeError (a failed sample), not a raw AttributeError (found by tests/robustness)."""

import numpy as np
import pytest

pytest.importorskip("av")

from chute.convert._video_probe import probe_video  # noqa: E402
from chute.errors import DecodeError  # noqa: E402
from chute.fallbacks import decode_frames  # noqa: E402
from tests._video_media import make_video  # noqa: E402


def test_unknown_codec_tag_is_a_decode_error():
    data = make_video(n=6, height=24, width=32, gop=3)
    pts = probe_video(data).pts
    bad = data.replace(b"avc1", b"xxxx")
    with pytest.raises(DecodeError, match="no decoder"):
        decode_frames(bad, pts, np.array([0, 2]), 0, None, None)
