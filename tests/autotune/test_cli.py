"""`chute autotune` end to end on a small real JPEG dataset, on this machine (no CUDA device)."""

import json

import pytest

from chute import cli
from chute.autotune import CANDIDATE_KEYS, JSON_KEYS, Candidate, TuneParams, load_record
from chute.pipelines.producers.image._auto import resolve_auto_backend, tune_dataset
from tests.pipelines._pipeline_data import write_dataset

BUDGET = "4"  # seconds: keeps the run short; the first candidate completes even past it


@pytest.fixture(scope="module")
def jpeg_dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("autotune") / "small.chute", n=24,
                         sizes=(40, 72))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("chute._device.cuda_device_count", lambda: 0)
    return tmp_path / "cache"


def _run(capsys, *argv):
    code = cli.main(["autotune", *map(str, argv)])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


@pytest.mark.slow
def test_json_on_this_machine_picks_cpu_and_lists_gpu_unavailable(jpeg_dataset, cache, capsys):
    out = _run(capsys, jpeg_dataset, "--batch-size", 8, "--image-size", 32, "--augment", "train",
               "--budget", BUDGET, "--json")
    result = json.loads(out)  # exactly one object: json.loads rejects trailing data
    assert tuple(result) == JSON_KEYS
    assert result["choice"] == "cpu"
    assert set(result["backend_options"]) == {"threads", "dct_scaling"}
    cands = result["candidates"]
    assert all(tuple(c) == CANDIDATE_KEYS for c in cands)
    measured = [c for c in cands if c["status"] == "measured"]
    assert measured and all(c["backend"] == "cpu" and c["img_per_s"] > 0 for c in measured)
    assert all(c["gpu_percent"] is None for c in cands)
    gpu = [c for c in cands if c["backend"] in ("dali", "dali-native")]
    assert len(gpu) == 6
    assert all(not c["available"] and c["reason"] == "no CUDA device available"
               and c["status"] == "unavailable" and c["img_per_s"] is None for c in gpu)
    winner = [c for c in measured if c["params"] == result["backend_options"]]
    assert len(winner) == 1 and winner[0]["name"] in result["reason"]
    # stored for ImageOptions(backend="auto"), with what was measured
    record = load_record(result["key"])
    assert record["choice"] == "cpu" and record["candidates"] == cands
    assert record["params"]["batch_size"] == 8 and record["params"]["device"] == "cpu"

    name, options, reason = resolve_auto_backend(
        jpeg_dataset, batch_size=8, image_size=32, augment="train", dtype="float16",
        device="cpu")
    assert (name, options) == ("cpu", result["backend_options"])
    assert result["key"] in reason


@pytest.mark.slow
def test_table_and_no_cache(jpeg_dataset, cache, capsys):
    out = _run(capsys, jpeg_dataset, "--batch-size", 8, "--image-size", "32x40", "--augment",
               "eval", "--budget", BUDGET, "--no-cache")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("candidate"))
    assert lines[header].split() == ["candidate", "img/s", "CPU", "%", "GPU", "%", "fidelity",
                                     "note"]
    assert sum("<- chosen" in line for line in lines) == 1
    # eval: only exact cpu candidates are offered (DCT-domain scaling never in eval)
    cpu_rows = [line for line in lines if line.startswith("cpu threads=")]
    assert cpu_rows and all("dct=off" in row and row.split()[6] == "exact" for row in cpu_rows)
    # dali and dali-native x 3 hw_decoder_load values, and nvimgcodec's 6 decoder configurations
    assert sum(line.endswith("no CUDA device available") for line in lines) == 12
    assert any(line.startswith("decision: cpu threads=") for line in lines)
    assert "stored:" not in out and not (cache / "autotune").exists()  # no decision stored


def test_bad_arguments_exit_with_usage(jpeg_dataset, cache, capsys):
    for argv in (["--batch-size", "0"], ["--batch-size", "8", "--budget", "-1"],
                 ["--batch-size", "8", "--image-size", "big"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(["autotune", str(jpeg_dataset), *argv])
        assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_auto_without_a_decision_on_this_machine_is_cpu_unmeasured(jpeg_dataset, cache):
    name, options, reason = resolve_auto_backend(
        jpeg_dataset, batch_size=4, image_size=32, augment="eval", device="cpu")
    assert (name, options) == ("cpu", {})
    assert reason == ("cpu chosen without measuring: the GPU backends cannot run here "
                      "(no CUDA device available)")
    assert not cache.exists()


@pytest.mark.slow
def test_a_real_candidate_that_fails_is_reported_not_hidden(jpeg_dataset, cache):
    good = Candidate("cpu threads=1 dct=on", "cpu", {"threads": 1, "dct_scaling": True},
                     cost=(0, 1, 0))
    bad = Candidate("cpu bogus", "cpu", {"threads": 1, "bogus": True}, cost=(0, 0, 0))
    result = tune_dataset(jpeg_dataset, TuneParams(8, 32, "eval"), budget=2.0, use_cache=False,
                          candidates=[bad, good])
    assert result["choice"] == "cpu" and result["backend_options"] == good.params
    failed = result["candidates"][0]
    assert failed["status"] == "failed" and "bogus" in failed["reason"]
    assert failed["reason"].startswith("failed: ValueError: unknown")


@pytest.mark.slow
def test_a_video_field_is_tuned_with_the_same_cache_and_report(tmp_path, cache, capsys):
    """The video family's candidates through the same command, table and decision cache: a
    Pipeline with VideoOptions(backend="auto") of that shape then uses the stored decision."""
    pytest.importorskip("av")
    pytest.importorskip("nvidia.dali")
    from chute import Pipeline, VideoOptions
    from tests.pipelines._dali_video_data import write_codec_videos

    videos = write_codec_videos(tmp_path / "vp9", frames=[12] * 6)
    argv = [videos, "--batch-size", 2, "--image-size", 16, "--num-frames", 3, "--augment",
            "eval", "--budget", BUDGET, "--device", "cpu"]
    table = _run(capsys, *argv)
    assert "field 'video'" in table and "clip/s" in table and "video dali" in table
    result = json.loads(_run(capsys, *argv, "--json"))
    assert result["unit"] == "clip" and result["choice"] in ("cpu", "dali")
    # nvdec is listed too, unavailable here (no PyNvVideoCodec, no CUDA device) with the reason
    assert {c["backend"] for c in result["candidates"]} == {"cpu", "dali", "nvdec"}
    options = VideoOptions(num_frames=3, size=(16, 16), backend="auto")
    with Pipeline(videos, 2, fields={"video": options}, device="cpu", augment="eval") as pipe:
        reason = pipe.stats.field_backends["video"]["reason"]
    assert reason.startswith(f"autotune decision {result['key']}")


def test_a_dataset_without_decoded_fields_is_refused_in_one_line(tmp_path, cache, capsys):
    latents = write_dataset(tmp_path / "lat", n=8, latent_shape=(2, 2), images=False)
    code = cli.main(["autotune", str(latents), "--batch-size", "2"])
    err = capsys.readouterr().err
    assert code != 0 and "has no image or video field to tune" in err
    assert "Traceback" not in err


def test_without_image_size_a_video_field_is_tuned_at_video_options_default(
        tmp_path, jpeg_dataset, cache, capsys, monkeypatch):
    """A video field tuned without --image-size is measured at VideoOptions().size (what a
    Pipeline with default VideoOptions(backend="auto") looks up), an image field at 224; --help
    says both."""
    pytest.importorskip("av")
    from chute import VideoOptions
    from chute._cli.autotune import VIDEO_SIZE_HELP
    from tests._video_media import convert_videos, make_video

    seen = {}

    def fake_video(dataset, **kwargs):
        seen["video"] = kwargs["options"]["size"]
        return {"key": "k"}

    def fake_image(dataset, params, **kwargs):
        seen["image"] = params.image_size
        return {"key": "k"}

    monkeypatch.setattr("chute.pipelines.tune_video", fake_video)
    monkeypatch.setattr("chute.pipelines.tune_dataset", fake_image)
    videos = convert_videos(tmp_path, [("a.mp4", make_video(6))])
    _run(capsys, videos, "--batch-size", 2, "--json")
    _run(capsys, jpeg_dataset, "--batch-size", 2, "--json")
    size = VideoOptions().size
    assert seen == {"video": size, "image": (224, 224)}
    assert size == (256, 256) and VIDEO_SIZE_HELP == f"{size[0]}x{size[1]}"
    with pytest.raises(SystemExit):
        cli.main(["autotune", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "224 for an image field, 256x256 for a video" in help_text
