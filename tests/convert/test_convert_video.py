import csv

import numpy as np
import pytest

pytest.importorskip("av")

from chute.convert._convert_video import convert_video_csv  # noqa: E402
from chute.errors import ChuteError  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import audio_only, full_decode, make_video  # noqa: E402

CASES = {
    "h264.mp4": dict(n=30, height=48, width=64),
    "vp9.webm": dict(n=12, height=40, width=56, codec="libvpx-vp9", container="webm"),
    "mpeg4.avi": dict(n=9, height=32, width=48, codec="mpeg4", container="avi"),
    "rotated.mkv": dict(n=8, height=32, width=48, container="matroska", rotation=90),
}


def _write_csv(folder, rows):
    with open(folder / "videos.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "text", "source"])
        w.writerows(rows)
    return folder / "videos.csv"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("videos")
    rows = []
    for name, kw in CASES.items():
        (folder / name).write_bytes(make_video(**kw))
        rows.append([name, f"a video {name}", "test"])
    (folder / "audio.mp4").write_bytes(audio_only())
    (folder / "cut.mp4").write_bytes(make_video(n=30)[:1500])
    (folder / "noise.mp4").write_bytes(b"\x00" * 4000)
    rows += [["audio.mp4", "", ""], ["cut.mp4", "", ""], ["noise.mp4", "", ""],
             ["missing.mp4", "", ""]]
    report = convert_video_csv(_write_csv(folder, rows), folder / "ds", progress=False)
    return folder, report


def test_probed_columns_and_bytes_as_stored(converted):
    folder, report = converted
    ds = open_dataset(folder / "ds")
    assert report.written == len(CASES) == len(ds)
    for i, (name, kw) in enumerate(CASES.items()):
        sample = ds[i]
        assert sample["video"].tobytes() == (folder / name).read_bytes()
        assert int(sample["num_frames"]) == kw["n"] == len(sample["pts"])
        h, w = kw["height"], kw["width"]
        if kw.get("rotation") in (90, 270):
            h, w = w, h
        assert (int(sample["height"]), int(sample["width"])) == (h, w)
        assert int(sample["rotation"]) == kw.get("rotation", 0)
        assert sample["keyframes"][0] == 0 and np.all(np.diff(sample["pts"]) > 0)
        assert sample["meta"] == {"key": name, "text": f"a video {name}", "source": "test"}
        assert sample["fps"] == pytest.approx(25, rel=0.01)


def test_unreadable_files_are_skipped_and_listed(converted):
    folder, report = converted
    skipped = dict(report.skipped)
    assert set(skipped) == {"audio.mp4", "cut.mp4", "noise.mp4", "missing.mp4"}
    assert "no video stream" in skipped["audio.mp4"]
    listed = (folder / "ds" / "skipped.tsv").read_text()
    assert all(name in listed for name in skipped)


def test_strict_and_nothing_stored_fail(tmp_path):
    (tmp_path / "bad.mp4").write_bytes(b"nope")
    table = _write_csv(tmp_path, [["bad.mp4", "", ""]])
    with pytest.raises(ChuteError, match="none of its 1 videos"):
        convert_video_csv(table, tmp_path / "ds", progress=False)
    with pytest.raises(ChuteError, match="--strict"):
        convert_video_csv(table, tmp_path / "ds2", progress=False, strict=True)
    assert not (tmp_path / "ds").exists() and not (tmp_path / "ds2").exists()


def test_avi_timestamps_in_decode_order_map_to_the_frames_shown():
    # AVI gives packets their decode order as timestamps: with H.264 B-frames the k-th smallest
    # is not the k-th frame shown, and a clip took other frames than the ones it named.
    from chute.convert._video_probe import probe_video
    from chute.fallbacks import decode_frames

    data = make_video(n=20, height=32, width=48, container="avi", gop=10, bframes=2)
    info = probe_video(data)
    shown = full_decode(data)
    assert info.num_frames == len(shown) == 20 and info.keyframes.tolist() == [0, 10]
    got = decode_frames(data, info.pts, np.arange(20))
    for k in range(20):
        np.testing.assert_array_equal(got[k], shown[k])


@pytest.mark.parametrize("container", ["matroska", "mp4"])
def test_a_variable_frame_rate_is_measured_from_the_timestamps(container):
    # The header declares 25 fps; the frames are 40 to 120 ms apart (about 13 fps).
    from chute.convert._video_probe import probe_video
    from chute.fallbacks import decode_frames

    pts_ms = np.cumsum([0] + [40, 120, 80, 40, 120, 80, 40, 120, 80, 40, 120]).tolist()
    data = make_video(n=12, height=32, width=48, container=container, pts_ms=pts_ms, gop=4)
    info = probe_video(data)
    assert info.num_frames == 12
    assert info.fps == pytest.approx(11 / 0.88, rel=0.01)
    assert info.duration == pytest.approx(12 * 0.88 / 11, rel=0.01)
    assert np.allclose(info.pts * info.time_base, np.asarray(pts_ms) / 1000, atol=1e-3)
    got = decode_frames(data, info.pts, np.arange(12))
    for k, frame in enumerate(full_decode(data)):
        np.testing.assert_array_equal(got[k], frame)


def test_frames_an_edit_list_hides_are_not_frames():
    # A stream cut after its keyframe keeps the frames before the cut for decoding and hides
    # them with an edit list: they were counted, and frame k was the frame shown at k - 5.
    from chute.convert._video_probe import probe_video
    from chute.fallbacks import decode_frames
    from tests._video_media import cut_start

    data = cut_start(make_video(n=24, height=32, width=48, gop=12, bframes=2), 5)
    info = probe_video(data)
    shown = full_decode(data)
    assert info.num_frames == len(shown) == 19 and info.pts[0] == 0
    got = decode_frames(data, info.pts, np.arange(19))
    for k in range(19):
        np.testing.assert_array_equal(got[k], shown[k])


@pytest.mark.parametrize("kw", [dict(container="matroska"),
                                dict(codec="mjpeg", container="avi", gop=1)])
def test_truncated_files_are_skipped(tmp_path, kw):
    # A file cut short still opens and its first frames decode; only its header (AVI frame
    # count, Matroska track DURATION) says frames are missing.
    data = make_video(n=30, height=32, width=48, **kw)
    (tmp_path / "whole.v").write_bytes(data)
    (tmp_path / "cut.v").write_bytes(data[: len(data) * 6 // 10])
    table = _write_csv(tmp_path, [["whole.v", "", ""], ["cut.v", "", ""]])
    report = convert_video_csv(table, tmp_path / "ds", progress=False)
    assert report.written == 1
    assert [name for name, _ in report.skipped] == ["cut.v"]
    assert "truncated" in report.skipped[0][1]


def test_a_stream_whose_codec_has_no_decoder_is_unreadable():
    """Found by tests/robustness/test_video_inputs.py (issue 26 item 16): a Matroska file whose
    codec id was corrupted has a video stream without a codec context, and probing raised a
    raw AttributeError (the convert aborted) instead of skipping the file."""
    from chute.convert._video_probe import UnreadableVideo, probe_video

    data = make_video(n=8, height=24, width=32, gop=4, container="matroska")
    assert data.count(b"V_MPEG4/ISO/AVC") == 1
    with pytest.raises(UnreadableVideo, match="no decoder"):
        probe_video(data.replace(b"V_MPEG4/ISO/AVC", b"V_QQQQQ/ISO/AVC"))


def test_a_truncated_container_is_reported_in_ffmpegs_words():
    # was "not a readable container ([Errno 1094995529] Invalid data found when processing
    # input: '<none>')": an errno and the name of an in-memory buffer
    from chute.convert._video_probe import UnreadableVideo, probe_video

    data = make_video(n=8, height=24, width=32, gop=4)
    with pytest.raises(UnreadableVideo) as info:
        probe_video(data[:len(data) // 10])
    assert str(info.value) == "not a readable container (Invalid data found when processing input)"


@pytest.mark.parametrize("rows", [[["path", "text", "path"], ["a.mp4", "clip", "b.mp4"]],
                                  [["text", "path"], ["clip"]]],
                         ids=["repeated-column", "row-without-path"])
def test_a_csv_whose_rows_name_no_path_is_one_line(tmp_path, rows, capsys):
    """Found by tests/robustness/test_video_inputs.py: a header naming `path` twice (the last
    one silently kept) or a row with fewer cells than the header gave rows without a path,
    and `chute convert video` raised a raw TypeError."""
    from chute.cli import main

    for name in ("a.mp4", "b.mp4"):  # the repeated column's last cell names a video too
        (tmp_path / name).write_bytes(make_video(n=8, height=24, width=32, gop=4))
    with open(tmp_path / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    assert main(["convert", "video", str(tmp_path / "v.csv"), str(tmp_path / "d"),
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "v.csv" in err and "path" in err
    assert not (tmp_path / "d").exists()


def test_a_listed_path_holding_a_nul_byte_is_skipped_and_listed(tmp_path):
    """Found by tests/robustness/test_video_inputs.py: a path with a NUL byte raised a raw
    ValueError that aborted the convert."""
    (tmp_path / "a.mp4").write_bytes(make_video(n=8, height=24, width=32, gop=4))
    with open(tmp_path / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "text"], ["a.mp4", "one"], ["a.mp4\x00x", "two"]])
    report = convert_video_csv(tmp_path / "v.csv", tmp_path / "d", progress=False, workers=1)
    assert report.written == 1
    assert report.skipped[0][0] == "a.mp4\x00x" and "cannot read" in report.skipped[0][1]
