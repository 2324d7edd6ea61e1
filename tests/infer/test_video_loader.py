"""VideoClipLoader's decoder and device (docs/inference.md, "Where the loader decodes"): backend
"dali" (DALI's CPU-only mode here, on the codecs it reads) gives the clips backend "cpu" gives,
"auto" says what it picked and why, a CUDA device without a GPU fails in one line (also when an
inference stage passes it), and on a GPU the clips are CUDA tensors."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from chute.errors import BackendUnavailableError, DecodeError
from chute.infer import VideoClipLoader
from chute.infer._build import build_stage

LOADER = {"num_frames": 4, "frame_interval": 3, "size": (24, 40), "dtype": "float32",
          "threads": 2}
# a request of each kind: one clip, three clips of one video, a rotated video, a short one
REQUESTS = [0, {"video": 2, "clips": 3}, 3, {"video": 4, "clips": 2}, 5]


@pytest.fixture(scope="module", params=["libvpx-vp9", "mjpeg"])
def dali_videos(request, tmp_path_factory):
    """A dataset in a codec DALI's CPU-only mode decodes, with sample 1 corrupt (its middle
    zeroed in the shard)."""
    pytest.importorskip("av")
    pytest.importorskip("nvidia.dali")
    from tests.pipelines._dali_video_data import write_codec_videos

    corrupt = (1,)
    return write_codec_videos(tmp_path_factory.mktemp(request.param), request.param,
                              corrupt=corrupt), corrupt


def _tolerance():
    # the bound of the dali-vs-cpu video producer twin test for resized clips
    from tests.pipelines.producers.video.test_producer_video_dali import RESIZED_TOLERANCE

    return RESIZED_TOLERANCE


def _assert_twins(cpu, dali):
    """Same shapes and dtypes; per clip, mean |dali - cpu| on the 0..255 scale within the
    twin test's bound."""
    assert cpu.shape == dali.shape and cpu.dtype == dali.dtype
    diff = (cpu.float() - dali.float().cpu()).abs() * 127.5  # [-1, 1] -> 0..255
    clips = diff.reshape(-1, *cpu.shape[-4:])  # [N, 3, T, H, W], N = 1 for one clip
    assert float(clips.reshape(len(clips), -1).mean(1).max()) <= _tolerance()


def test_dali_on_the_cpu_gives_the_cpu_backends_clips_and_failures(dali_videos):
    dali_videos, corrupt = dali_videos
    cpu = VideoClipLoader(dali_videos, backend="cpu", **LOADER)
    dali = VideoClipLoader(dali_videos, backend="dali", **LOADER)
    assert (cpu.backend, dali.backend) == ("cpu", "dali")
    assert "CPU-only mode" in dali.backend_reason
    requests = [*REQUESTS, 1, {"video": 1, "clips": 2}]
    want, got = cpu(requests), dali(requests)
    for request, a, b in zip(requests, want, got, strict=True):
        video = request["video"] if isinstance(request, dict) else request
        if video in corrupt:  # the corrupt sample fails its requests alike, the others go on
            assert isinstance(a, DecodeError) and isinstance(b, DecodeError)
            assert str(a) == str(b)
            continue
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (a, b)
        _assert_twins(a, b)
    assert got[1].shape == (3, 3, 4, 24, 40) and got[0].device.type == "cpu"
    assert got[0].is_shared()  # handed to the next stage without a copy
    cpu.close()
    dali.close()


def test_more_clips_than_max_batch_decode_in_runs_of_the_dali_graphs_batch(dali_videos,
                                                                            monkeypatch):
    """Requests of several clips make more rows than `max_batch` (the DALI graph's batch size):
    they decode in runs of that size through one pipeline, not by failing the batch in DALI and
    rebuilding the pipeline to decode every row alone."""
    import chute.pipelines.producers.video._dali as dali_module

    dali_videos, _ = dali_videos
    built = []
    build = dali_module.build_video_pipeline
    monkeypatch.setattr(dali_module, "build_video_pipeline",
                        lambda config: built.append(config) or build(config))
    retried = []
    retry = dali_module.DaliVideoProducer._retry
    monkeypatch.setattr(dali_module.DaliVideoProducer, "_retry",
                        lambda self, i, *rest: retried.append(i) or retry(self, i, *rest))
    requests = [{"video": 2, "clips": 3}, 0, 5]  # 5 rows for a graph of 2
    cpu = VideoClipLoader(dali_videos, backend="cpu", max_batch=2, **LOADER)
    dali = VideoClipLoader(dali_videos, backend="dali", max_batch=2, **LOADER)
    want, got = cpu(requests), dali(requests)
    assert (len(built), retried) == (1, [])
    for a, b in zip(want, got, strict=True):
        _assert_twins(a, b)
    cpu.close()
    dali.close()


def test_dali_that_cannot_read_a_codec_names_the_loaders_cpu_backend(video_dataset):
    pytest.importorskip("nvidia.dali")
    loader = VideoClipLoader(video_dataset, backend="dali", num_frames=4, size=32)
    with pytest.raises(BackendUnavailableError, match=r"(?s)h264.*Use this loader's "
                                                      r"backend='cpu'") as refused:
        loader([0])
    assert "VideoOptions" not in str(refused.value)  # a Pipeline's remedy, not this loader's
    loader.close()


def test_auto_on_the_cpu_picks_the_cpu_backend_and_says_why(video_dataset, caplog):
    with caplog.at_level(logging.INFO, logger="chute.infer"):
        loader = VideoClipLoader(video_dataset, num_frames=4, size=32)
    assert loader.backend == "cpu" and loader.device == "cpu"
    assert "device 'cpu'" in loader.backend_reason and "VP9" in loader.backend_reason
    logged = [r.getMessage() for r in caplog.records if "VideoClipLoader" in r.getMessage()]
    assert len(logged) == 1 and loader.backend_reason in logged[0]
    loader.close()
    files_only = VideoClipLoader(root=video_dataset.parent, num_frames=4, size=32)
    assert files_only.backend == "cpu" and "file requests" in files_only.backend_reason
    files_only.close()


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"backend": "nvjpeg"}, ValueError,
     r"^VideoClipLoader\(backend='nvjpeg'\): expected one of auto, cpu, dali, nvdec$"),
    ({"backend": "nvdec"}, ValueError,
     r"^VideoClipLoader\(backend='nvdec'\): NVDEC decodes on a CUDA device and this "
     r"loader's device is 'cpu'; give device='cuda'"),
    ({"device": "gpu0"}, ValueError, r"^VideoClipLoader\(device='gpu0'\): expected 'cpu'"),
    ({"dataset": None, "root": ".", "backend": "dali"}, ValueError,
     r"^VideoClipLoader\(backend='dali'\): DALI decodes through the dataset's "
     r"video-dali producer and this loader has no dataset"),
])
def test_a_bad_backend_or_device_fails_in_one_line(video_dataset, options, error, message):
    kwargs = {"dataset": video_dataset, "num_frames": 4, **options}
    with pytest.raises(error, match=message) as raised:
        VideoClipLoader(**kwargs)
    assert "\n" not in str(raised.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
@pytest.mark.parametrize("backend", ["auto", "cpu", "dali", "nvdec"])
def test_a_cuda_device_without_a_gpu_fails_in_one_line(video_dataset, backend):
    with pytest.raises(BackendUnavailableError,
                       match=r"^VideoClipLoader\(device='cuda:0'\): this machine has no CUDA "
                             r"device .*place the loader stage on 'cpu'") as raised:
        VideoClipLoader(video_dataset, num_frames=4, backend=backend, device="cuda:0")
    assert "\n" not in str(raised.value)


def test_an_inference_stage_passes_its_device_to_the_loader(video_dataset):
    # the loader used to take no device=, so a stage on "cuda:0" decoded on the CPU and
    # delivered CPU tensors without a word
    options = {"num_frames": 4, "size": 32}
    loader = build_stage("chute.infer:VideoClipLoader", options, base=None, device="cpu",
                         dataset=str(video_dataset))
    assert isinstance(loader, VideoClipLoader) and loader.device == "cpu"
    loader.close()
    if torch.cuda.is_available():
        loader = build_stage("chute.infer:VideoClipLoader", options, base=None,
                             device="cuda:0", dataset=str(video_dataset))
        assert loader.device == "cuda:0" and loader([0])[0].is_cuda
        loader.close()
    else:
        with pytest.raises(BackendUnavailableError, match=r"device='cuda:0'"):
            build_stage("chute.infer:VideoClipLoader", options, base=None, device="cuda:0",
                        dataset=str(video_dataset))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["dali", "cpu"])
def test_on_a_gpu_the_clips_are_cuda_tensors_equal_to_the_cpu_ones(dali_videos, backend):
    dali_videos, corrupt = dali_videos
    cpu = VideoClipLoader(dali_videos, backend="cpu", root=dali_videos.parent, **LOADER)
    gpu = VideoClipLoader(dali_videos, backend=backend, device="cuda:0",
                          root=dali_videos.parent, **LOADER)
    assert gpu.backend == backend and gpu.device == "cuda:0"
    suffix = ".webm" if (dali_videos.parent / "v0.webm").exists() else ".avi"
    # what NVDEC makes of a damaged payload is the video-dali producer's to test (tests/gpu)
    failing = corrupt if backend == "cpu" else ()
    requests = [*REQUESTS, f"v0{suffix}", {"video": f"v3{suffix}", "clips": 2}, *failing]
    want, got = cpu(requests), gpu(requests)
    served = len(requests) - len(failing)
    for a, b in zip(want[:served], got[:served], strict=True):
        assert b.is_cuda and b.device == torch.device("cuda:0")
        if backend == "cpu":
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)
        else:
            _assert_twins(a, b)
    for a, b in zip(want[served:], got[served:], strict=True):
        assert isinstance(a, DecodeError) and isinstance(b, DecodeError)
    auto = VideoClipLoader(dali_videos, device="cuda:0", **LOADER)
    assert auto.backend == "dali" and "NVDEC" in auto.backend_reason
    for loader in (cpu, gpu, auto):
        loader.close()


def test_a_configs_loader_options_choose_the_backend(tmp_path, video_dataset):
    pytest.importorskip("nvidia.dali")
    from chute.infer import load_config

    (tmp_path / "c.json").write_text(json.dumps({"stages": [
        {"name": "decode", "fn": "chute.infer:VideoClipLoader", "devices": "cpu",
         "options": {"num_frames": 4, "size": 32, "backend": "dali"}}]}))
    stage = load_config(tmp_path / "c.json").stage("decode")
    loader = build_stage(stage.fn, stage.options, base=str(tmp_path), device=stage.device(0),
                         dataset=str(video_dataset))
    assert (loader.backend, loader.device) == ("dali", "cpu")
    assert type(loader.producer).__name__ == "DaliVideoProducer"
    loader.close()


def _suffix(dataset) -> str:
    return ".webm" if (dataset.parent / "v0.webm").exists() else ".avi"


def test_dali_file_requests_give_the_cpu_backends_clips(dali_videos):
    # file requests used to decode with PyAV whatever the backend
    dataset, _ = dali_videos
    s = _suffix(dataset)
    cpu = VideoClipLoader(dataset, backend="cpu", root=dataset.parent, **LOADER)
    # max_batch=2: a request of 3 clips decodes in two runs of the graph
    dali = VideoClipLoader(dataset, backend="dali", root=dataset.parent,
                           **{**LOADER, "max_batch": 2})
    # one clip, three clips, the rotated video, a video shorter than a clip
    requests = [f"v0{s}", {"video": f"v2{s}", "clips": 3}, f"v3{s}", {"video": f"v4{s}",
                                                                     "clips": 2}]
    want, got = cpu(requests), dali(requests)
    for a, b in zip(want, got, strict=True):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (a, b)
        _assert_twins(a, b)
        # DALI's resize filter is not FFmpeg's: equal bits would mean PyAV decoded both
        assert not torch.equal(a, b)
        assert b.device.type == "cpu" and b.is_shared()
    assert got[1].shape == (3, 3, 4, 24, 40) and got[2].shape == (3, 4, 24, 40)
    cpu.close()
    dali.close()


def test_a_damaged_file_fails_its_request_alike_on_both_backends(dali_videos):
    dataset, _ = dali_videos
    s = _suffix(dataset)
    # frame 20, zeroed whole, is in the centre clip of v2 (45 frames: 17, 20, 23, 26)
    (dataset.parent / f"bad{s}").write_bytes(
        _damage_packet((dataset.parent / f"v2{s}").read_bytes(), 20, count=None))
    failed = []
    for backend in ("cpu", "dali"):
        loader = VideoClipLoader(dataset, backend=backend, root=dataset.parent, **LOADER)
        bad, good = loader([f"bad{s}", f"v2{s}"])
        assert isinstance(good, torch.Tensor)
        failed.append(bad)
        loader.close()
    for error in failed:
        assert isinstance(error, DecodeError) and "\n" not in str(error)
        assert str(error).startswith(f"request 'bad{s}': ")


def test_dali_fails_an_mjpeg_frame_cut_short_that_ffmpeg_conceals(tmp_path, dali_videos):
    # its last 40 bytes (the EOI marker and the end of the scan) zeroed: FFmpeg's and DALI's
    # decoders both return a picture, a wrong one; the dali backend fails the request
    # (docs/video.md, "Backends")
    dataset, _ = dali_videos
    if _suffix(dataset) != ".avi":
        pytest.skip("MJPEG only")
    data = (dataset.parent / "v2.avi").read_bytes()
    (tmp_path / "cut.avi").write_bytes(_damage_packet(data, 20, -40, None))
    loader = VideoClipLoader(dataset, backend="dali", root=tmp_path, **LOADER)
    (cut,) = loader(["cut.avi"])
    assert isinstance(cut, DecodeError), cut
    assert "frame at pts 20 is not a whole JPEG" in str(cut) and "\n" not in str(cut)
    loader.close()


def test_a_files_mjpeg_check_demuxes_it_once_not_per_request(tmp_path, dali_videos,
                                                              monkeypatch):
    """The whole-stream MJPEG check of a file is kept with its probe: a whole file is demuxed
    for it once over two requests; a damaged one's clips are still checked per request."""
    import chute.pipelines.producers.video._dali as dali_module

    dataset, _ = dali_videos
    if _suffix(dataset) != ".avi":
        pytest.skip("MJPEG only")
    data = (dataset.parent / "v2.avi").read_bytes()
    (tmp_path / "whole.avi").write_bytes(data)
    (tmp_path / "cut.avi").write_bytes(_damage_packet(data, 20, -40, None))
    checks = []
    damage = dali_module._mjpeg_damage
    monkeypatch.setattr(dali_module, "_mjpeg_damage",
                        lambda data, pts, frames: checks.append(frames is None)
                        or damage(data, pts, frames))
    loader = VideoClipLoader(dataset, backend="dali", root=tmp_path, **LOADER)
    first, second = loader(["whole.avi"]), loader(["whole.avi"])
    assert isinstance(first[0], torch.Tensor) and torch.equal(first[0], second[0])
    assert checks == [True]  # the whole stream, once
    checks.clear()
    cut = loader(["cut.avi"]) + loader(["cut.avi"])
    assert all(isinstance(c, DecodeError) and "frame at pts 20 is not a whole JPEG" in str(c)
               for c in cut), cut
    assert checks == [True, False, False]  # the stream once, then each request's clip
    loader.close()


@pytest.fixture(scope="module")
def vp9_root(tmp_path_factory):
    """A VP9 dataset without rotated videos, its root holding a rotated VP9 file, an H.264
    file and a VP9 file with one packet's start zeroed (it probes, it does not decode)."""
    pytest.importorskip("av")
    pytest.importorskip("nvidia.dali")
    from tests._video_media import make_video
    from tests.pipelines._dali_video_data import write_codec_videos

    dataset = write_codec_videos(tmp_path_factory.mktemp("vp9"), frames=[10, 12], rotated=None)
    root = dataset.parent
    vp9 = {"codec": "libvpx-vp9", "container": "webm", "gop": 6, "natural": True}
    (root / "turned.webm").write_bytes(make_video(20, 40, 56, rotation=90, **vp9))
    (root / "h264.mp4").write_bytes(make_video(20, 48, 64, natural=True))
    (root / "bad.webm").write_bytes(_damage_packet(make_video(30, 48, 64, **vp9), 12))
    return dataset


def _damage_packet(data: bytes, k: int, start: int = 0, count: int | None = 8) -> bytes:
    """`data` with `count` bytes (None: to the end) of its k-th video packet zeroed from
    `start` (negative: from the packet's end); the container intact."""
    import io

    import av

    with av.open(io.BytesIO(data)) as container:
        packet = [bytes(p) for p in container.demux(video=0) if p.size][k]
    at = data.index(packet) + start % len(packet)
    end = data.index(packet) + len(packet) if count is None else at + count
    return data[:at] + bytes(end - at) + data[end:]


def test_a_rotated_file_decodes_on_dali_though_the_dataset_has_none(vp9_root):
    cpu = VideoClipLoader(vp9_root, backend="cpu", root=vp9_root.parent, **LOADER)
    dali = VideoClipLoader(vp9_root, backend="dali", root=vp9_root.parent, **LOADER)
    assert not dali.producer.config.rotate  # the file needs the graph with rotation
    requests = ["turned.webm", {"video": "turned.webm", "clips": 2}]
    for a, b in zip(cpu(requests), dali(requests), strict=True):
        assert isinstance(b, torch.Tensor), b
        _assert_twins(a, b)
        assert not torch.equal(a, b)  # decoded by DALI, not PyAV
    cpu.close()
    dali.close()


def test_a_file_dali_cannot_read_fails_its_request_naming_the_cpu_backend(vp9_root):
    dali = VideoClipLoader(vp9_root, backend="dali", root=vp9_root.parent, **LOADER)
    h264, other = dali(["h264.mp4", 0])
    assert isinstance(h264, BackendUnavailableError) and "\n" not in str(h264)
    assert "request 'h264.mp4'" in str(h264) and "'h264'" in str(h264)
    assert "Use this loader's backend='cpu'" in str(h264)
    assert isinstance(other, torch.Tensor)  # the other requests go on
    dali.close()


def test_a_corrupt_file_fails_its_request_alike_on_both_backends(vp9_root):
    failed = []
    for backend in ("cpu", "dali"):
        loader = VideoClipLoader(vp9_root, backend=backend, root=vp9_root.parent, **LOADER)
        bad, good = loader(["bad.webm", "turned.webm"])
        assert isinstance(good, torch.Tensor)
        failed.append(bad)
        loader.close()
    for error in failed:
        assert isinstance(error, DecodeError) and "\n" not in str(error)
        assert str(error).startswith(f"request 'bad.webm': {vp9_root.parent / 'bad.webm'} "
                                     "does not decode (")


@pytest.mark.parametrize(("dali", "nvdec", "chosen", "says"), [
    (None, None, "dali", "DALI imports"),
    ("no DALI here", None, "nvdec", "PyNvVideoCodec imports"),
    ("no DALI here", "no driver", "cpu", "neither DALI (no DALI here) nor PyNvVideoCodec"),
])
def test_auto_on_a_cuda_device_prefers_dali_then_nvdec_then_cpu(monkeypatch, dali, nvdec,
                                                                chosen, says):
    import chute.infer._video_loader as loader

    monkeypatch.setattr(loader, "dali_import_error", lambda: dali)
    monkeypatch.setattr(loader, "nvdec_import_error", lambda: nvdec)
    backend, why = loader._choose("auto", "cuda:0", dataset=object())
    assert backend == chosen and says in why


@pytest.mark.gpu
def test_nvdec_dataset_requests_are_cuda_clips_like_the_cpu_ones(video_dataset):
    pytest.importorskip("PyNvVideoCodec")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cpu = VideoClipLoader(video_dataset, backend="cpu", **LOADER)
    gpu = VideoClipLoader(video_dataset, backend="nvdec", device="cuda", **LOADER)
    try:
        for a, b in zip(cpu([0, 2]), gpu([0, 2]), strict=True):
            assert b.is_cuda and a.shape == b.shape
            assert float((a - b.cpu()).abs().mean()) * 127.5 <= _tolerance()
    finally:
        cpu.close()
        gpu.close()
