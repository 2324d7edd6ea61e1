import numpy as np
import pytest

pytest.importorskip("av")

from chute.convert._video_probe import probe_video  # noqa: E402
from chute.errors import DecodeError  # noqa: E402
from chute.fallbacks import decode_frames  # noqa: E402
from tests._video_media import full_decode, level, make_asp_avi, make_video  # noqa: E402


@pytest.mark.parametrize("kw", [dict(), dict(gop=5, bframes=3), dict(codec="mpeg4"),
                                dict(codec="libvpx-vp9", container="webm")])
def test_frames_equal_a_full_decode_at_those_indices(kw):
    data = make_video(n=40, **kw)
    info = probe_video(data)
    reference = full_decode(data)
    indices = np.array([33, 0, 7, 7, 21, 39])  # any order, repeats, across keyframes
    got = decode_frames(data, info.pts, indices)
    for k, i in enumerate(indices):
        np.testing.assert_array_equal(got[k], reference[i])
        assert abs(float(got[k][-1, -1, 1]) - level(int(i))) <= 3


def test_only_the_needed_span_is_decoded(monkeypatch):
    import av.container

    data = make_video(n=60, gop=10, bframes=0)
    info = probe_video(data)
    demuxed = []
    real = av.container.InputContainer.demux

    def counting(self, *args, **kwargs):
        for packet in real(self, *args, **kwargs):
            demuxed.append(packet.pts)
            yield packet

    monkeypatch.setattr(av.container.InputContainer, "demux", counting)
    decode_frames(data, info.pts, np.array([45, 47]))
    assert 0 < len(demuxed) <= 10  # from the keyframe at 40 to frame 47, not the whole file


def test_rotation_turns_frames_to_display_orientation():
    data = make_video(n=4, height=32, width=48, rotation=90)
    info = probe_video(data)
    frame = decode_frames(data, info.pts, np.array([1]), info.rotation)[0]
    assert frame.shape == (48, 32, 3)
    assert frame[:, :2, 0].mean() > 200  # the red top band is now on the left


def test_a_truncated_stream_is_a_decode_error():
    data = make_video(n=40, gop=40)
    info = probe_video(data)
    with pytest.raises(DecodeError):
        decode_frames(data[: len(data) // 2], info.pts, np.array([39]))


@pytest.mark.parametrize("kw", [dict(codec="mpeg4", container="avi", bframes=2),
                                dict(codec="mpeg2video", container="mp4", bframes=2),
                                dict(container="mpegts", bframes=2)])
def test_every_clip_start_decodes_where_keyframes_are_indexed_by_decode_time(kw):
    # AVI and MP4 index keyframes by decode timestamp: with B-frames a seek to a frame just
    # before a keyframe lands on that keyframe, past the frame (HEVC's open GOPs too; not
    # generated here: libx265 after the MPEG encoders in one process corrupts the heap).
    # MPEG-TS has no index: a seek lands on any frame, keyframe or not.
    data = make_video(n=24, height=32, width=48, gop=8, **kw)
    info = probe_video(data)
    reference = full_decode(data)
    assert info.num_frames == len(reference) == 24
    for start in range(23):
        indices = np.array([start, start + 1])
        got = decode_frames(data, info.pts, indices)
        for k, i in enumerate(indices):
            np.testing.assert_array_equal(got[k], reference[i])


def test_frames_that_depend_on_damaged_data_are_a_decode_error():
    # Bytes flipped inside frame 15's packet: FFmpeg conceals the damage and flags only frame
    # 15 corrupt; frames 16 and 17 refer to it and came back plausible but wrong.
    import io

    import av

    data = bytearray(make_video(n=30, height=64, width=96, container="matroska", gop=10,
                                bframes=0, natural=True))
    with av.open(io.BytesIO(bytes(data))) as c:
        packets = [(p.pos, p.size) for p in c.demux(video=0) if p.size]
    pos, size = packets[15]
    for offset in range(pos + size // 3, pos + size - 1, max(1, size // 8)):
        data[offset] ^= 0x5A
    data = bytes(data)
    info = probe_video(data)
    with pytest.raises(DecodeError, match="corrupt"):
        decode_frames(data, info.pts, np.array([16, 17]))
    clean = full_decode(make_video(n=30, height=64, width=96, container="matroska", gop=10,
                                   bframes=0, natural=True))
    for i in (12, 21):  # before the damage; the next GOP
        np.testing.assert_array_equal(decode_frames(data, info.pts, np.array([i]))[0], clean[i])


# Every container and codec PyAV writes here that real datasets ship (AVI and MP4 of several
# codecs): long-GOP MPEG-4 Part 2 ASP AVIs as Xvid/DivX write them (UCF-101, HMDB), packed
# B-frames included, next to H.264 in MP4, Matroska and AVI, MPEG-4 in MP4 and MJPEG in AVI.
CODECS = {
    "asp-avi": lambda: make_asp_avi(60, 48, 64, gop=12),
    "asp-avi-packed": lambda: make_asp_avi(60, 48, 64, gop=12, packed=True),
    "asp-avi-packed-bf3": lambda: make_asp_avi(60, 48, 64, gop=12, bframes=3, packed=True),
    "asp-avi-packed-bf1": lambda: make_asp_avi(60, 48, 64, gop=12, bframes=1, packed=True),
    "h264-mp4": lambda: make_video(60, 48, 64, gop=12, bframes=2, natural=True),
    "h264-mkv": lambda: make_video(60, 48, 64, container="matroska", gop=12, bframes=3,
                                   natural=True),
    "h264-avi": lambda: make_video(60, 48, 64, container="avi", gop=12, bframes=2,
                                   natural=True),
    "mpeg4-mp4": lambda: make_video(60, 48, 64, codec="mpeg4", gop=12, bframes=2, natural=True,
                                    options={"sc_threshold": "1000000000"}),
    "mjpeg-avi": lambda: make_video(60, 48, 64, codec="mjpeg", container="avi", natural=True),
    # FFmpeg's own MPEG-4 encoder into AVI (scene-change keyframes on): the probe keeps few
    # keyframes as starts, so a clip's seeks step back past the first frame, where the AVI
    # demuxer refuses the (negative) timestamp
    "mpeg4-avi": lambda: make_video(60, 48, 64, codec="mpeg4", container="avi", gop=12,
                                    bframes=2, natural=True),
}


# the fast lane decodes one container of each codec family; the slow lane every one
FAST_CODECS = {"asp-avi-packed-bf3", "h264-mp4", "mpeg4-avi", "mjpeg-avi"}


@pytest.mark.parametrize("codec", [c if c in FAST_CODECS
                                   else pytest.param(c, marks=pytest.mark.slow)
                                   for c in sorted(CODECS)])
def test_every_16_frame_clip_equals_a_full_decode(codec):
    # Packed B-frames (a P-frame and the B-frame shown before it in one AVI chunk) made
    # libavformat's guessed timestamps come out of order: clips took other frames or failed,
    # and after a seek to some keyframes the packed frames decode to other pixels.
    data = CODECS[codec]()
    info = probe_video(data)
    reference = full_decode(data)
    assert info.num_frames == len(reference) == 60
    for start in range(len(reference) - 15):
        indices = np.arange(start, start + 16)
        got = decode_frames(data, info.pts, indices, keyframes=info.keyframes)
        for k, i in enumerate(indices):
            np.testing.assert_array_equal(got[k], reference[i], err_msg=f"clip {start} frame {i}")


def test_a_keyframe_whose_frames_decode_wrongly_after_a_seek_is_no_start():
    # Some keyframes of a packed stream decode to other pixels after a seek (the B-frame packed
    # with the I-frame has no reference there): the probe keeps only the ones that reproduce
    # the full decode, and a clip after a dropped one is decoded from an earlier keyframe.
    data = make_asp_avi(100, 48, 64, gop=12, packed=True)
    info = probe_video(data)
    reference = full_decode(data)
    flagged = [k for k in range(0, 100, 12)]
    assert 0 in info.keyframes and set(info.keyframes) < set(flagged)
    dropped = sorted(set(flagged) - set(info.keyframes))[0]
    got = decode_frames(data, info.pts, np.arange(dropped, dropped + 4),
                        keyframes=info.keyframes)
    for k in range(4):
        np.testing.assert_array_equal(got[k], reference[dropped + k])
