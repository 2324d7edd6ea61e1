"""Decoding a clip without the unwanted H.264 frames no other frame depends on, and with one
scaler per thread, gives the pixels of a full decode."""

import io

import numpy as np
import pytest

av = pytest.importorskip("av")

from chute.convert._video_probe import probe_video  # noqa: E402
from chute.fallbacks import _video, decode_frames  # noqa: E402
from chute.fallbacks._h264_refs import disposable_test  # noqa: E402
from tests._video_media import make_video  # noqa: E402


def _counting_test(monkeypatch) -> list[bool]:
    """Record every answer of the disposable test decode_frames uses."""
    answers: list[bool] = []
    real = _video.disposable_test

    def counting(codec, extradata):
        test = real(codec, extradata)
        if test is None:
            return None

        def wrapped(packet):
            answers.append(test(packet))
            return answers[-1]
        return wrapped

    monkeypatch.setattr(_video, "disposable_test", counting)
    return answers


def _strided(start: int, stride: int, n: int = 8) -> np.ndarray:
    return start + np.arange(n) * stride


@pytest.mark.parametrize("kw", [dict(gop=30, bframes=3), dict(gop=12, bframes=2),
                                dict(gop=30, bframes=3, container="matroska")])
@pytest.mark.parametrize("stride", [2, 3, 4])
def test_skipping_disposable_frames_keeps_every_wanted_pixel(monkeypatch, kw, stride):
    data = make_video(n=64, height=40, width=56, texture=True, **kw)
    info = probe_video(data)
    answers = _counting_test(monkeypatch)
    for start in (0, 1, 5, 30):
        indices = _strided(start, stride, n=min(8, (63 - start) // stride + 1))
        full = decode_frames(data, info.pts, indices, skip=False)
        for size in (None, (24, 24)):
            skipped = decode_frames(data, info.pts, indices, size=size)
            reference = full if size is None else decode_frames(data, info.pts, indices,
                                                                size=size, skip=False)
            np.testing.assert_array_equal(skipped, reference)
    assert any(answers), "no packet was skipped: the test did not exercise the shortcut"


def test_codecs_without_a_test_decode_every_packet(monkeypatch):
    data = make_video(n=30, codec="mpeg4")
    info = probe_video(data)
    answers = _counting_test(monkeypatch)
    got = decode_frames(data, info.pts, np.array([3, 9, 15]))
    np.testing.assert_array_equal(got, decode_frames(data, info.pts, np.array([3, 9, 15]),
                                                     skip=False))
    assert answers == []
    assert disposable_test("hevc", b"\x01" * 30) is None


@pytest.mark.parametrize("container", ["mp4", "mpegts"])
def test_disposable_packets_are_the_ones_ffmpeg_drops_as_non_reference(container):
    """FFmpeg's own skip_frame=NONREF decodes only reference pictures: the packets our NAL
    header test calls disposable are exactly the frames it leaves out (length-prefixed mp4
    packets and Annex B transport stream packets)."""
    data = make_video(n=48, gop=24, bframes=3, container=container)
    with av.open(io.BytesIO(data)) as c:
        stream = c.streams.video[0]
        test = disposable_test(stream.codec_context.name, stream.codec_context.extradata)
        packets = [(p.pts, test(p)) for p in c.demux(stream) if p.size]
    with av.open(io.BytesIO(data)) as c:
        stream = c.streams.video[0]
        stream.codec_context.skip_frame = "NONREF"
        references = {f.pts for f in c.decode(stream)}
    disposable = {pts for pts, flag in packets if flag}
    assert disposable and references
    assert disposable == {pts for pts, _ in packets} - references


def _avcc(*units: bytes) -> bytes:
    return b"".join(len(u).to_bytes(4, "big") + u for u in units)


AVCC_EXTRADATA = bytes([1, 0x64, 0, 0x1F, 0xFF])  # avcC record head: 4-byte lengths


@pytest.mark.parametrize("units, expected", [
    ((b"\x01\x9a\x00",), True),                       # non-reference slice
    ((b"\x09\xf0", b"\x01\x9a\x00"), True),           # access unit delimiter + slice
    ((b"\x06\x05\x02ab\x80", b"\x01\x9a"), True),     # user data SEI + slice
    ((b"\x06\x06\x01\x84\x80", b"\x01\x9a"), False),  # recovery point SEI carries state
    ((b"\x21\x9a\x00",), False),                      # a reference slice (nal_ref_idc 1)
    ((b"\x41\x9a\x00",), False),                      # nal_ref_idc 2
    ((b"\x65\x88",), False),                          # IDR
    ((b"\x67\x64", b"\x01\x9a"), False),              # SPS in the packet
    ((b"\x0a", b"\x01\x9a"), False),                  # end of sequence
    ((b"\x06\x05\x02ab\x80",), False),                # no slice at all
    ((b"\x81\x9a",), False),                          # forbidden bit set
])
def test_nal_header_rules(units, expected):
    test = disposable_test("h264", AVCC_EXTRADATA)
    assert test(_avcc(*units)) is expected
    annex_b = disposable_test("h264", None)
    assert annex_b(b"".join(b"\x00\x00\x00\x01" + u for u in units)) is expected


def test_malformed_packets_are_decoded():
    test = disposable_test("h264", AVCC_EXTRADATA)
    assert test(b"") is False
    assert test(b"\x00\x00\x00\x09\x01\x9a") is False  # length past the end
    assert test(b"\x00\x00\x00\x00") is False          # zero length


def test_a_frame_lost_to_skipping_is_decoded_again_in_full(monkeypatch):
    """If skipping ever loses a wanted frame, the span is decoded whole, with a warning."""
    data = make_video(n=40, gop=20, bframes=2)
    info = probe_video(data)
    monkeypatch.setattr(_video, "disposable_test", lambda codec, extra: lambda packet: True)
    indices = np.array([22, 26])
    with pytest.warns(RuntimeWarning, match="whole span"):
        got = decode_frames(data, info.pts, indices)
    np.testing.assert_array_equal(got, decode_frames(data, info.pts, indices, skip=False))


def test_reused_scalers_equal_a_fresh_scaler_per_frame():
    """One scaler per thread and geometry, alternating sizes and videos, gives the pixels of a
    new scaler for every frame."""
    a = make_video(n=12, height=48, width=64, texture=True)
    b = make_video(n=12, height=36, width=36, texture=True)
    expected = {}
    for name, data in (("a", a), ("b", b)):
        with av.open(io.BytesIO(data)) as c:
            frames = list(c.decode(video=0))
        for size in ((24, 24), (20, 30)):
            h, w = _video._fill_dims(frames[0].height, frames[0].width, 0, size)
            out = []
            for f in frames[:6]:
                rgb = f.reformat(width=w, height=h, format="rgb24",
                                 interpolation="BILINEAR").to_ndarray()
                top, left = (h - size[0]) // 2, (w - size[1]) // 2
                out.append(rgb[top:top + size[0], left:left + size[1]])
            expected[name, size] = np.stack(out)
    for _ in range(2):
        for name, data in (("a", a), ("b", b)):
            info = probe_video(data)
            for size in ((24, 24), (20, 30)):
                got = decode_frames(data, info.pts, np.arange(6), size=size)
                np.testing.assert_array_equal(got, expected[name, size])
