"""VideoOptions(backend="auto") (chute/pipelines/producers/video/_auto.py): the cpu and dali
video producers are measured by the autotune library on the dataset, like the image backends
(same decision cache and report), and the faster is used; where DALI cannot run or read the
data, "cpu", saying why."""

from __future__ import annotations

import pytest

pytest.importorskip("av")
pytest.importorskip("nvidia.dali")

import chute.pipelines.producers.video._auto as auto_video  # noqa: E402
from chute import Pipeline, VideoOptions  # noqa: E402
from chute.autotune import format_table  # noqa: E402
from tests.autotune._fakes import FakeClock, FakeRunner  # noqa: E402
from tests.pipelines._dali_video_data import write_codec_videos  # noqa: E402

OPTS = VideoOptions(num_frames=3, frame_interval=2, size=(16, 16), backend="auto")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def vp9(tmp_path_factory):
    return write_codec_videos(tmp_path_factory.mktemp("vp9"), frames=[12] * 8)


def _pipe(path, **kw):
    return Pipeline(path, 2, device="cpu", augment="eval", fields={"video": OPTS}, **kw)


def _producer_name(pipe) -> str:
    return next(p.name for p in pipe._assembly.producers if p.field == "video")


def _fake_rates(monkeypatch, rates: dict):
    """Measurements at `rates` (clips/s by backend) on a fake clock: exact and instant."""
    clock = FakeClock()
    runners = []

    def runner(*args):
        fake = FakeRunner(clock, {c.name: rates.get(c.backend, 0.0)
                                  for c in auto_video.candidates("cpu")})
        runners.append(fake)
        return fake

    real = auto_video.autotune
    monkeypatch.setattr(auto_video, "_runner", runner)
    monkeypatch.setattr(auto_video, "autotune", lambda *a, **k: real(*a, **{**k, "clock": clock}))
    return runners


@pytest.mark.parametrize("rates, chosen, name", [
    ({"cpu": 10.0, "dali": 20.0}, "dali", "video-dali"),
    ({"cpu": 30.0, "dali": 20.0}, "cpu", "video"),
])
def test_the_faster_measured_backend_is_used_and_stored(vp9, monkeypatch, rates, chosen, name):
    runners = _fake_rates(monkeypatch, rates)
    with _pipe(vp9) as pipe:
        choice = pipe.stats.field_backends["video"]
        assert choice["backend"] == chosen and _producer_name(pipe) == name
        assert choice["reason"].startswith("quick autotune (10s budget, decision ")
        assert f"({max(rates.values()):.0f} clip/s) won by" in choice["reason"]
        next(iter(pipe))
    assert sorted(runners[0].opened) == ["video cpu (PyAV)", "video dali"]
    with _pipe(vp9) as pipe:  # the stored decision: nothing measured again
        assert _producer_name(pipe) == name
        assert pipe.stats.field_backends["video"]["reason"].startswith("autotune decision ")
    assert len(runners) == 1


@pytest.mark.slow
def test_a_real_measurement_reports_both_rates_and_delivers(vp9):
    result = auto_video.tune_video(
        __import__("chute").open_dataset(vp9), field="video",
        options={"num_frames": 3, "frame_interval": 2, "size": (16, 16)}, device="cpu",
        batch_size=2, augment="eval", budget=4.0, use_cache=False)
    assert result["unit"] == "clip" and result["choice"] in ("cpu", "dali")
    measured = [c for c in result["candidates"] if c["status"] == "measured"]
    assert {c["backend"] for c in measured} == {"cpu", "dali"}
    assert "clip/s" in format_table(result).splitlines()[0]
    with _pipe(vp9) as pipe:
        assert next(iter(pipe))["video"].shape == (2, 3, 3, 16, 16)


@pytest.mark.slow
def test_data_dali_cannot_read_here_gives_cpu_with_the_reason(tmp_path):
    path = write_codec_videos(tmp_path / "h264", "libx264", frames=[10] * 4)
    with _pipe(path) as pipe:
        choice = pipe.stats.field_backends["video"]
        assert choice["backend"] == "cpu" and _producer_name(pipe) == "video"
        assert "1 failed, e.g. video dali: failed: " in choice["reason"]
        assert "h264" in choice["reason"]


def test_cpu_without_measuring_where_dali_cannot_run(monkeypatch):
    from chute._device import cuda_device_count

    if cuda_device_count():
        pytest.skip("a CUDA device is present: the dali video backend can run")
    monkeypatch.setattr(auto_video, "autotune", lambda *a, **k: pytest.fail("measured"))
    reason = auto_video.resolve_video_backend(
        dataset=None, field="video", options={}, device="cuda", batch_size=2, augment="eval")
    backend, why = reason
    assert backend == "cpu" and why.startswith(
        "cpu without measuring: the dali video backend cannot run here (no CUDA device) and "
        "the nvdec one cannot either (")


def test_the_round2_spelling_reaches_the_same_decision(vp9, monkeypatch):
    _fake_rates(monkeypatch, {"cpu": 10.0, "dali": 20.0})
    options = {"num_frames": 3, "frame_interval": 2, "size": (16, 16), "backend": "auto"}
    with pytest.warns(DeprecationWarning, match=r"VideoOptions\(num_frames=3"), \
            Pipeline(vp9, 2, device="cpu", augment="eval", fields=("video",),
                     field_options={"video": options}) as pipe:
        assert _producer_name(pipe) == "video-dali"


@pytest.mark.slow
def test_under_buckets_the_largest_clips_are_measured_at_their_own_batch_size(vp9, monkeypatch):
    # the quick tune measured the largest batch size with the largest frame count, height and
    # width of any bucket: docs/video.md's own example needed 4 x 8.2 GiB, so every candidate
    # failed ("autotune could not measure any candidate"); 4 such batches do not fit in 300 kB
    from chute import Buckets

    monkeypatch.setattr("chute.pipelines._common._options._physical_memory", lambda: 300_000)
    config = {"32x32": {4: {"1:1": (1.0, 1)}}, "16x16": {1: {"1:1": (1.0, 8)}}}
    with Pipeline(vp9, None, device="cpu", batching=Buckets(config), fields={"video": VideoOptions(
            frame_interval=2, backend="auto")}) as pipe:
        assert pipe.stats.field_backends["video"]["reason"].startswith("quick autotune")
        assert {tuple(b["video"].shape[1:]) for b in pipe} <= {(3, 4, 32, 32), (3, 1, 16, 16)}
    measured, batch = auto_video._measured_options(VideoOptions(), pipe.batching.table, 8)
    assert (measured.num_frames, measured.size, batch) == (4, (32, 32), 1)


@pytest.mark.slow
def test_under_buckets_short_error_does_not_fail_the_quick_tune(tmp_path):
    # buckets leave out videos shorter than a bucket's clips, so short="error" never refuses
    # them in the bucketed Pipeline; the quick tune's plain Pipeline of the largest bucket
    # refused them and every candidate failed ("autotune could not measure any candidate")
    from chute import Buckets

    path = write_codec_videos(tmp_path / "v", frames=[12] * 4 + [30] * 4)
    config = {"32x32": {16: {"1:1": (1.0, 1)}}, "16x16": {1: {"1:1": (1.0, 4)}}}
    with Pipeline(path, None, device="cpu", batching=Buckets(config), fields={
            "video": VideoOptions(backend="auto", short="error")}) as pipe:
        assert pipe.stats.field_backends["video"]["reason"].startswith("quick autotune")
        assert {tuple(b["video"].shape[1:]) for b in pipe} == {(3, 16, 32, 32), (3, 1, 16, 16)}
