"""VideoOptions(backend="auto"): the Pipeline measures the cpu and dali video producers on the
dataset and uses the faster; where DALI cannot run or read the data, "cpu", saying why."""

from __future__ import annotations

import pytest

pytest.importorskip("av")
pytest.importorskip("nvidia.dali")

import chute.pipelines.producers.video._auto as auto_video  # noqa: E402
from chute import Pipeline, VideoOptions  # noqa: E402
from tests.pipelines._dali_video_data import write_codec_videos  # noqa: E402

OPTS = VideoOptions(num_frames=3, frame_interval=2, size=(16, 16), backend="auto")


@pytest.fixture(scope="module")
def vp9(tmp_path_factory):
    return write_codec_videos(tmp_path_factory.mktemp("vp9"), frames=[12] * 8)


def _pipe(path, **kw):
    return Pipeline(path, 2, device="cpu", augment="eval", fields={"video": OPTS}, **kw)


def _producer_name(pipe) -> str:
    return next(p.name for p in pipe._producers if p.field == "video")


@pytest.mark.parametrize("rates, chosen, name", [
    ({"cpu": 1.0, "dali": 2.0}, "dali", "video-dali"),
    ({"cpu": 3.0, "dali": 2.0}, "cpu", "video"),
])
def test_the_faster_measured_backend_is_used(vp9, monkeypatch, rates, chosen, name):
    calls = []

    def rate(dataset, field, options, backend, *args):
        calls.append(backend)
        return rates[backend]

    monkeypatch.setattr(auto_video, "_rate", rate)
    monkeypatch.setattr(auto_video, "_decided", {})
    with _pipe(vp9) as pipe:
        assert pipe.stats.field_backends["video"]["backend"] == chosen
        assert _producer_name(pipe) == name
        assert f"cpu {rates['cpu']:.2f} clips/s" in pipe.stats.field_backends["video"]["reason"]
        next(iter(pipe))
    assert calls == ["cpu", "dali", "dali", "cpu"]
    with _pipe(vp9) as pipe:  # decided once per process
        assert _producer_name(pipe) == name
    assert len(calls) == 4


def test_a_real_measurement_reports_both_rates_and_delivers(vp9, monkeypatch):
    monkeypatch.setattr(auto_video, "_decided", {})
    with _pipe(vp9) as pipe:
        choice = pipe.stats.field_backends["video"]
        assert choice["backend"] in ("cpu", "dali")
        assert "cpu " in choice["reason"] and "dali " in choice["reason"]
        batch = next(iter(pipe))
    assert batch["video"].shape == (2, 3, 3, 16, 16)


def test_data_dali_cannot_read_here_gives_cpu_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(auto_video, "_decided", {})
    path = write_codec_videos(tmp_path / "h264", "libx264", frames=[10] * 4)
    with _pipe(path) as pipe:
        choice = pipe.stats.field_backends["video"]
        assert choice["backend"] == "cpu" and _producer_name(pipe) == "video"
        assert "cannot read this dataset" in choice["reason"] and "h264" in choice["reason"]


def test_cpu_without_measuring_where_dali_cannot_run(vp9, monkeypatch):
    from chute._device import cuda_device_count

    if cuda_device_count():
        pytest.skip("a CUDA device is present: the dali video backend can run")
    monkeypatch.setattr(auto_video, "_rate", lambda *a: pytest.fail("measured"))
    reason = auto_video.resolve_video_backend(
        dataset=None, field="video", options={}, device="cuda", batch_size=2, augment="eval")
    assert reason == ("cpu", "cpu without measuring: the dali video backend cannot run here "
                             "(no CUDA device)")


def test_the_round2_spelling_reaches_the_same_decision(vp9, monkeypatch):
    monkeypatch.setattr(auto_video, "_decided", {})
    monkeypatch.setattr(auto_video, "_rate", lambda dataset, field, options, backend, *a:
                        {"cpu": 1.0, "dali": 2.0}[backend])
    options = {"num_frames": 3, "frame_interval": 2, "size": (16, 16), "backend": "auto"}
    with pytest.warns(DeprecationWarning, match=r"VideoOptions\(num_frames=3"), \
            Pipeline(vp9, 2, device="cpu", augment="eval", fields=("video",),
                     field_options={"video": options}) as pipe:
        assert _producer_name(pipe) == "video-dali"
