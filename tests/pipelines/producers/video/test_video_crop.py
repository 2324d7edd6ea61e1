"""Random spatial crops of training clips: keyed by (seed, epoch, sample id), pixel-equal to a
reference crop of the resized frames, centred in evaluation."""

from __future__ import annotations

import csv
import dataclasses
import io

import numpy as np
import pytest
import torch

pytest.importorskip("av")

from chute.convert._convert_video import convert_video_csv  # noqa: E402
from chute.pipelines import Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers.video._clips import ClipParams, clip_indices  # noqa: E402
from chute.pipelines.producers.video._crop import VideoCropParams  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import make_video  # noqa: E402

FRAMES = [14, 9, 17, 12, 10, 15]
H, W, SIZE = 40, 64, (16, 16)  # filled to 16 x 26: 10 columns of room
OPTS = VideoOptions(num_frames=3, frame_interval=2, size=SIZE, crop="random")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crop")
    rows = []
    for k, n in enumerate(FRAMES):
        (folder / f"v{k}.mp4").write_bytes(make_video(n=n, height=H, width=W, gop=4,
                                                      texture=True))
        rows.append([f"v{k}.mp4", f"clip {k}"])
    with open(folder / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "text"], *rows])
    convert_video_csv(folder / "v.csv", folder / "ds", progress=False)
    return folder / "ds"


def _clips(videos, seed, epoch, augment="train", opts=OPTS):
    with Pipeline(videos, 2, augment=augment, device="cpu", seed=seed,
                  fields={"video": opts}) as pipe:
        pipe.set_epoch(epoch)
        return {int(i): v.clone() for b in pipe
                for i, v in zip(b["index"].tolist(), b["video"], strict=True)}


def _reference(videos, i, start, left):
    """[3, T, 16, 16]: the clip's frames resized to fill by FFmpeg, cropped at column left."""
    import av

    fill_w = round(W * SIZE[0] / H)
    with av.open(io.BytesIO(open_dataset(videos)[i]["video"].tobytes())) as c:
        frames = [f.reformat(width=fill_w, height=SIZE[0], format="rgb24",
                             interpolation="BILINEAR").to_ndarray() for f in c.decode(video=0)]
    clip = np.stack([frames[f][:, left:left + SIZE[1]]
                     for f in clip_indices(start, 3, 2, FRAMES[i])])
    return torch.from_numpy(clip).permute(3, 0, 1, 2)


def test_random_crops_are_keyed_and_pixel_equal_to_a_reference_crop(videos):
    room = round(W * SIZE[0] / H) - SIZE[1]
    ids = np.arange(len(FRAMES))
    lefts = {}
    for epoch in (0, 1):
        got = _clips(videos, 7, epoch)
        again = _clips(videos, 7, epoch)
        assert got.keys() == again.keys() and all(torch.equal(got[i], again[i]) for i in got)
        starts = ClipParams(3, 2, "train", np.array(FRAMES))(7, epoch, ids)["clip_start"]
        fx = VideoCropParams()(7, epoch, ids)["crop_x"]
        for i, clip in got.items():
            left = int(np.floor(fx[i] * (room + 1)))
            lefts[epoch, i] = left
            assert torch.equal(clip, _reference(videos, i, int(starts[i]), left)), (epoch, i)
    shared = {i for e, i in lefts if e == 0} & {i for e, i in lefts if e == 1}
    assert any(lefts[0, i] != lefts[1, i] for i in shared)  # a new crop each epoch
    assert any(left != room // 2 for left in lefts.values())  # not the centre crop


def test_centre_crop_by_default_and_in_evaluation(videos):
    room = round(W * SIZE[0] / H) - SIZE[1]
    centre = dataclasses.replace(OPTS, crop="center")
    for clips, augment in ((_clips(videos, 7, 0, "train", centre), "train"),
                           (_clips(videos, 7, 0, "eval"), "eval")):
        ids = np.arange(len(FRAMES))
        starts = ClipParams(3, 2, augment, np.array(FRAMES))(7, 0, ids)["clip_start"]
        for i, clip in clips.items():
            assert torch.equal(clip, _reference(videos, i, int(starts[i]), room // 2))


def test_an_unknown_crop_is_explained(videos):
    with pytest.raises(ValueError, match="crop must be one of"):
        Pipeline(videos, 2, device="cpu", fields={"video": VideoOptions(crop="left")})
