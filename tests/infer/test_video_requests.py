"""VideoClipLoader requests beyond one sample id: several clips of one video per request
(spread over it, docs/inference.md "Requests") and video files under the loader's root."""

import json
import os

import pytest
import torch

from chute.convert import probe_video
from chute.fallbacks import decode_frames
from chute.infer import VideoClipLoader
from chute.pipelines import spread_clips
from tests._video_media import make_video

LOADER = {"num_frames": 4, "size": 32, "dtype": "float32", "threads": 2}


def test_spread_clips_centre_one_clip_per_equal_segment():
    # one clip: the centred eval clip (start (frames - span) // 2)
    assert spread_clips(100, 1, 16).tolist() == [list(range(42, 58))]
    assert spread_clips(101, 1, 15)[0, 0] == (101 - 15) // 2
    # 10 clips of 8 over 300 frames: centred on 15, 45, ..., 285
    clips = spread_clips(300, 10, 8)
    assert clips.shape == (10, 8)
    assert ((clips[:, 0] + clips[:, -1] + 1) // 2).tolist() == list(range(15, 300, 30))
    # clips near the ends move inside the video; frame_interval spaces a clip's frames
    assert spread_clips(20, 2, 8, 2).tolist() == [list(range(0, 15, 2)), list(range(5, 20, 2))]
    # a video shorter than a clip repeats its last frame, in every clip
    assert spread_clips(5, 3, 8).tolist() == [[0, 1, 2, 3, 4, 4, 4, 4]] * 3
    with pytest.raises(ValueError, match="clips"):
        spread_clips(10, 0, 4)


def test_several_clips_per_request_are_the_spread_clips(video_dataset):
    loader = VideoClipLoader(video_dataset, **LOADER)
    one, three, default = loader([2, {"video": 2, "clips": 3}, {"video": 2}])
    assert one.shape == (3, 4, 32, 32) and three.shape == (3, 3, 4, 32, 32)
    torch.testing.assert_close(default, one, rtol=0, atol=0)
    # each clip is the frames spread_clips names, as a full decode of the source gives them
    source = video_dataset.parent / "v2.mp4"
    data = source.read_bytes()
    info = probe_video(data)
    frames = spread_clips(info.num_frames, 3, 4)
    assert len({tuple(f) for f in frames.tolist()}) == 3  # three different clips
    for k, indices in enumerate(frames):
        rgb = decode_frames(data, info.pts, indices, info.rotation, (32, 32))
        want = torch.from_numpy(rgb).permute(3, 0, 1, 2).float() / 127.5 - 1
        torch.testing.assert_close(three[k], want, rtol=0, atol=1e-6)
    # the centred clip is one of the clips of a single-clip request
    torch.testing.assert_close(loader([{"video": 2, "clips": 1}])[0][0], one, rtol=0, atol=0)
    loader.close()


def test_the_loaders_clips_option_applies_to_every_request(video_dataset):
    loader = VideoClipLoader(video_dataset, clips=2, **LOADER)
    a, b = loader([0, {"video": 0, "clips": 5}])
    assert a.shape == (2, 3, 4, 32, 32) and b.shape == (5, 3, 4, 32, 32)
    with pytest.raises(ValueError, match="clips"):
        VideoClipLoader(video_dataset, clips=0, **LOADER)
    loader.close()


def test_a_file_request_equals_its_converted_sample(video_dataset):
    root = video_dataset.parent  # the source videos the dataset was converted from
    loader = VideoClipLoader(video_dataset, root=root, **LOADER)
    for k in range(4):
        by_id, by_path, clips_id, clips_path = loader(
            [k, f"v{k}.mp4", {"video": k, "clips": 3}, {"video": root / f"v{k}.mp4",
                                                        "clips": 3}])
        torch.testing.assert_close(by_path, by_id, rtol=0, atol=0)
        torch.testing.assert_close(clips_path, clips_id, rtol=0, atol=0)
    loader.close()
    # without a dataset: files only
    alone = VideoClipLoader(root=root, **LOADER)
    assert alone(["v1.mp4"])[0].shape == (3, 4, 32, 32)
    with pytest.raises(IndexError, match="no dataset"):
        alone([0])
    alone.close()


def test_file_requests_stay_inside_the_root(video_dataset, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "in.mp4").write_bytes(make_video(10, 32, 32))
    (tmp_path / "secret.mp4").write_bytes(make_video(10, 32, 32))
    os.symlink(tmp_path / "secret.mp4", root / "link.mp4")
    (root / "notes.txt").write_text("not a video")
    loader = VideoClipLoader(root=root, **LOADER)
    out = loader(["in.mp4", "../secret.mp4", str(tmp_path / "secret.mp4"), "link.mp4",
                  "missing.mp4", "notes.txt", {"video": "in.mp4", "clips": 0}, 1.5])
    assert out[0].shape == (3, 4, 32, 32)
    for k in (1, 2, 3):  # a relative escape, an absolute path, a symlink leading out
        assert isinstance(out[k], ValueError) and "outside the loader's root" in str(out[k])
        assert str(tmp_path / "secret.mp4") in str(out[k])
    assert isinstance(out[4], ValueError) and "no file" in str(out[4])
    assert isinstance(out[5], ValueError) and "notes.txt" in str(out[5])
    assert isinstance(out[6], ValueError) and "clips" in str(out[6])
    assert isinstance(out[7], ValueError) and "expected a sample id" in str(out[7])
    loader.close()
    # a loader without a root refuses every path
    by_id = VideoClipLoader(video_dataset, **LOADER)
    refused = by_id([str(root / "in.mp4")])[0]
    assert isinstance(refused, ValueError) and "root=" in str(refused)
    by_id.close()
    with pytest.raises(ValueError, match="dataset.*root"):
        VideoClipLoader(**LOADER)


def test_the_file_list_is_checked_before_anything_starts(tmp_path):
    from chute.cli import main

    (tmp_path / "a.mp4").write_bytes(make_video(10, 32, 32))
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"stages": [{"name": "decode",
                                              "fn": "chute.infer:VideoClipLoader"}]}))
    listing = tmp_path / "list.txt"
    listing.write_text("# videos\na.mp4\n\n../outside.mp4\n")
    assert main(["infer-bench", str(config), "--files", str(listing)]) == 1
    listing.write_text("a.mp4\nmissing.mp4\n")
    assert main(["infer-bench", str(config), "--files", str(listing)]) == 1
    assert main(["infer-bench", str(config)]) == 1


@pytest.mark.slow
def test_infer_bench_serves_files_with_several_clips(tmp_path, video_dataset, capsys):
    from chute.cli import main
    from tests.infer.conftest import EXAMPLES

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"stages": [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader",
         "options": {"num_frames": 8, "size": 32}, "max_batch": 2},
        {"name": "model", "fn": f"{EXAMPLES / 'video_classifier.py'}:build",
         "options": {"seed": 0}, "max_batch": 2, "max_wait_ms": 10}]}))
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"v{k}.mp4\n" for k in range(4)))
    code = main(["infer-bench", str(config), "--files", str(listing), "--root",
                 str(video_dataset.parent), "--clips", "3", "--requests", "6", "--json",
                 "--no-progress", "--allow-outside"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["failed"] == 0 and result["completed"] == 6
    # a path outside --root is refused with one line before any replica starts
    listing.write_text("../elsewhere.mp4\n")
    assert main(["infer-bench", str(config), "--files", str(listing), "--root",
                 str(video_dataset.parent), "--allow-outside"]) == 1
    assert "outside the root" in capsys.readouterr().err


def test_a_relative_root_in_a_config_file_is_relative_to_the_configs_folder(tmp_path,
                                                                            monkeypatch):
    # a relative loader root in a config file was resolved against the working directory
    # of each replica, not the config's folder (as "file.py:attr" specs are)
    from chute.infer import load_config

    pytest.importorskip("av")
    folder = tmp_path / "configs"
    (folder / "videos").mkdir(parents=True)
    (folder / "videos" / "a.mp4").write_bytes(make_video(10, 32, 32))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "videos").mkdir(parents=True)  # the same relative root from the cwd: empty
    monkeypatch.chdir(elsewhere)
    absolute = tmp_path / "abs"
    (folder / "c.json").write_text(json.dumps({"stages": [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader",
         "options": {**LOADER, "root": "videos"}},
        {"name": "again", "fn": "chute.infer:VideoClipLoader",
         "options": {**LOADER, "root": str(absolute)}},
        {"name": "other", "fn": "tests.infer._stages:double", "options": {"root": "videos"}}]}))
    config = load_config(folder / "c.json")
    options = config.stage("decode").options
    assert options["root"] == str(folder.resolve() / "videos")
    assert config.stage("again").options["root"] == str(absolute)  # absolute: as it is
    assert config.stage("other").options == {"root": "videos"}  # not a loader: untouched
    loader = VideoClipLoader(**options)
    assert loader(["a.mp4"])[0].shape == (3, 4, 32, 32)
    loader.close()
