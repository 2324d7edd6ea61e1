"""Which errors the `dali` video backend takes for a sample it cannot decode: only what the DALI
pipeline raises while decoding. A failure copying DALI's clips into the batch (a CUDA error, a
buffer of the wrong kind) or one of chute's own errors while building the graph is no
sample's fault: it reaches the caller as it is, never retried sample by sample and reported as
a codec DALI cannot read."""

from __future__ import annotations

import pytest

pytest.importorskip("av")
pytest.importorskip("nvidia.dali")

import chute.pipelines.producers.video._dali as video_dali  # noqa: E402
from chute.errors import BackendUnavailableError, ChuteError  # noqa: E402
from chute.pipelines import Pipeline, VideoOptions  # noqa: E402
from tests.pipelines._dali_video_data import write_codec_videos  # noqa: E402


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return write_codec_videos(tmp_path_factory.mktemp("vp9"), frames=[12, 12])


def _first_batch(path):
    video = VideoOptions(num_frames=2, frame_interval=2, backend="dali")
    with Pipeline(path, 2, device="cpu", augment="eval", fields={"video": video}) as pipe:
        return next(iter(pipe))


def test_a_failed_copy_of_the_clips_is_not_a_corrupt_sample(videos, monkeypatch):
    def write_native(clips, target):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(video_dali, "write_native", write_native)
    with pytest.raises(RuntimeError, match="^CUDA error: an illegal memory") as info:
        _first_batch(videos)
    assert not isinstance(info.value, ChuteError)


def test_chutes_own_error_while_building_the_graph_is_passed_on(videos, monkeypatch):
    def build(config):
        raise BackendUnavailableError("DALI's video decoder is missing; install nvidia-dali")

    monkeypatch.setattr(video_dali, "build_video_pipeline", build)
    with pytest.raises(BackendUnavailableError, match="^DALI's video decoder is missing"):
        _first_batch(videos)
