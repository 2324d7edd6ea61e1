"""The `dali` video backend (field option backend="dali") against the cpu video backend: DALI's
CPU mode here on the codecs it decodes (VP9, VP8, MJPEG), the GPU mode where a GPU exists.
Same frame numbers (each frame carries its number in its green level), pixels within tolerance
at native size and resized, the same extra outputs, buckets on two ranks, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("av")
pytest.importorskip("nvidia.dali")

from chute.errors import BackendUnavailableError  # noqa: E402
from chute.pipelines import Buckets, Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers.video._clips import ClipParams, clip_indices  # noqa: E402
from tests._video_media import level  # noqa: E402
from tests.pipelines._dali_video_data import FRAMES, write_codec_videos  # noqa: E402

NATIVE_TOLERANCE = 2.0  # mean |dali - cpu| on uint8 at native size (issue 15's bound)
RESIZED_TOLERANCE = 3.0  # the same after resize + crop (two resize filters)
FIELDS = ("video", "num_frames", "height", "width", "fps", "meta")
OPTS = {"num_frames": 4, "frame_interval": 3}  # VideoOptions of every test's clips


@pytest.fixture(scope="module", params=["libvpx-vp9", "libvpx", "mjpeg"])
def videos(request, tmp_path_factory):
    return write_codec_videos(tmp_path_factory.mktemp(request.param), request.param)


def _epoch(path, backend, batch_size=2, options=(), fields=FIELDS, **kw):
    """One epoch of `fields`; `options`: VideoOptions keywords besides OPTS and the backend."""
    video = VideoOptions(**{**OPTS, **dict(options), "backend": backend})
    with Pipeline(path, batch_size, device="cpu",
                  fields={f: video if f == "video" else None for f in fields}, **kw) as pipe:
        return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                for b in pipe]


def _compare(cpu, dali, tolerance, scale=1.0):
    """Same batches, keys, ids, shapes, dtypes and extras; clips within `tolerance`."""
    assert len(cpu) == len(dali) > 0
    worst = 0.0
    for a, b in zip(cpu, dali, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key == "video":
                assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype
                diff = (a[key].float() - b[key].float()).abs() * scale
                per_sample = diff.reshape(len(diff), -1).mean(1)
                worst = max(worst, float(per_sample.max()))
            elif isinstance(a[key], torch.Tensor):
                assert torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key
    assert worst <= tolerance
    return worst


@pytest.mark.parametrize("augment", ["eval", "train"])
def test_native_size_same_frames_as_the_cpu_backend(videos, augment):
    kw = dict(augment=augment, seed=3, options={"size": None})
    dali = _epoch(videos, "dali", batch_size=1, **kw)
    _compare(_epoch(videos, "cpu", batch_size=1, **kw), dali, NATIVE_TOLERANCE)
    starts = ClipParams(4, 3, augment, np.array(FRAMES))(3, 0, np.arange(len(FRAMES)))
    for batch in dali:
        i = int(batch["index"][0])
        want = [level(int(f)) for f in clip_indices(int(starts["clip_start"][i]), 4, 3,
                                                     FRAMES[i])]
        green = batch["video"][0, 1].float().mean(dim=(1, 2))  # [T]: the frame's number
        assert np.allclose(green.numpy(), want, atol=3), (i, green, want)


@pytest.mark.parametrize("options", [
    {"size": (24, 40), "crop": "random"},
    {"size": (32, 32), "dtype": "float32", "layout": "TCHW"},
    {"size": 20, "dtype": "float16"},
])
def test_resized_clips_match_the_cpu_backend(videos, options):
    kw = dict(augment="train", seed=1, batch_size=3, options=options)
    dali = _epoch(videos, "dali", **kw)
    scale = 1.0 if options.get("dtype", "uint8") == "uint8" else 127.5  # [-1, 1] -> 0..255
    _compare(_epoch(videos, "cpu", **kw), dali, RESIZED_TOLERANCE, scale)
    if scale != 1.0:
        clips = torch.cat([b["video"] for b in dali]).float()
        assert -1.0 <= clips.min() and clips.max() <= 1.0


def test_buckets_on_two_ranks_give_the_cpu_backend_shapes_and_samples(tmp_path):
    path = write_codec_videos(tmp_path / "b", frames=[30, 12, 45, 20, 8, 33, 16, 25, 40])
    config = {"16x16": {2: (1.0, 2), 4: (1.0, 1)}, "32x48": {4: (1.0, 1)}}
    steps = {}
    for backend in ("cpu", "dali"):
        steps[backend] = [
            _epoch(path, backend, batch_size=None, batching=Buckets(config), rank=r,
                   world_size=2, seed=5, fields=("video",), options={"frame_interval": 2})
            for r in range(2)]
    for rank in range(2):
        _compare(steps["cpu"][rank], steps["dali"][rank], RESIZED_TOLERANCE)
    for a, b in zip(*steps["dali"], strict=True):
        assert a["video"].shape[1:] == b["video"].shape[1:]  # one bucket per step
        assert set(a["index"].tolist()).isdisjoint(b["index"].tolist())


def test_a_codec_dali_cannot_decode_here_names_sample_shard_and_the_cpu_backend(tmp_path):
    path = write_codec_videos(tmp_path / "h264", "libx264", frames=[10, 10])
    with pytest.raises(BackendUnavailableError,
                       match=r"(?s)sample 0 .*shard .*h264.*VideoOptions\(backend='cpu'\)"):
        _epoch(path, "dali", augment="eval")


@pytest.mark.parametrize("codec", ["libvpx-vp9", "mjpeg"])
def test_a_corrupt_video_is_substituted_and_counted(tmp_path, codec):
    # MJPEG: DALI's decoder used to return pictures for the frames FFmpeg's demuxer no longer
    # finds in the damaged payload, and the sample was delivered
    path = write_codec_videos(tmp_path / "bad", codec, frames=[20, 20, 20, 20], corrupt=(2,))
    with pytest.warns(RuntimeWarning, match="sample 2 "):
        with Pipeline(path, 4, augment="eval", device="cpu",
                      fields={"video": VideoOptions(**OPTS, backend="dali")}) as pipe:
            batch = next(iter(pipe))
            assert pipe.stats.decode_errors == 1
    assert 2 not in batch["index"].tolist()


def test_an_unknown_video_backend_is_explained(videos):
    # refused where it is written (issue 38 item 13), naming the backends there are
    with pytest.raises(ValueError, match=r"VideoOptions: backend must be one of \['cpu', 'dali'.*"
                                         r"backend='gpu'"):
        Pipeline(videos, 2, device="cpu", fields={"video": VideoOptions(backend="gpu")})


@pytest.fixture(scope="module")
def real_frames():
    """The first 40 frames of a real H.264 clip of ../shared/data (skip where it is absent)."""
    import os

    import av

    from tests.conftest import SHARED_DATA

    path = SHARED_DATA / "videos" / "cotracker_bear.mp4"
    if not path.is_file() or os.environ.get("CHUTE_NO_SHARED"):
        pytest.skip("../shared/data/videos is not present")
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f, _ in zip(c.decode(video=0), range(40),
                                                             strict=False)]


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("codec, container", [("libvpx-vp9", "webm"), ("mjpeg", "avi")])
def test_real_footage_reencoded_matches_the_cpu_backend(real_frames, tmp_path, codec,
                                                        container):
    from tests._video_media import convert_videos, make_video

    data = make_video(codec=codec, container=container, gop=12, images=real_frames)
    path = convert_videos(tmp_path, [(f"bear.{container}", data)] * 2, shard_size="1MB")
    for size, tolerance in ((None, NATIVE_TOLERANCE), ((256, 256), RESIZED_TOLERANCE)):
        kw = dict(augment="train", seed=4, batch_size=2,
                  options={"size": size, "num_frames": 8, "frame_interval": 4})
        _compare(_epoch(path, "cpu", **kw), _epoch(path, "dali", **kw), tolerance)


@pytest.mark.gpu
@pytest.mark.parametrize("size, batch_size, tolerance", [
    (None, 1, NATIVE_TOLERANCE), ((24, 40), 3, RESIZED_TOLERANCE)])
def test_gpu_mode_decodes_h264_like_the_cpu_backend(tmp_path, size, batch_size, tolerance):
    path = write_codec_videos(tmp_path / "gpu", "libx264")
    kw = dict(augment="train", seed=2, batch_size=batch_size, options={"size": size})
    video = VideoOptions(**OPTS, size=size, backend="dali")
    with Pipeline(path, batch_size, device="cuda", augment="train", seed=2,
                  fields={f: video if f == "video" else None for f in FIELDS}) as p:
        assert p.stats.samples == 0 and p._outputs["video"].on_device
        dali = [{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                for b in p]
    _compare(_epoch(path, "cpu", **kw), dali, tolerance)
