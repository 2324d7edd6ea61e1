"""The nvdec video backend (chute/pipelines/producers/video/_nvdec.py) without a GPU: a fake
PyNvVideoCodec whose decoder returns frame k as a flat picture of `level(k)` (the level the
test videos give frame k), fake CUDA streams and events (tests/pipelines/_fake_cuda.py) and a
nearest-pixel stand-in for the resize kernel, driven through a real Pipeline, against the cpu
backend on generated media: H.264 with B-frames, HEVC, VP9, AV1 and MPEG-4 in MP4, MKV and
AVI, a variable frame rate, a rotated and a short video."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging

import numpy as np
import pytest
import torch

pytest.importorskip("av")

import chute.kernels  # noqa: E402
import chute.pipelines.producers.video._nvdec as nvdec  # noqa: E402
from chute.errors import BackendUnavailableError  # noqa: E402
from chute.pipelines import Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers.video._cpu import VideoProducer  # noqa: E402
from chute.pipelines.producers.video._nvdec_plan import (  # noqa: E402
    caps_refusal,
    clip_box,
    frame_request,
)
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import convert_videos, level, make_asp_avi, make_video  # noqa: E402
from tests.pipelines._fake_cuda import FakeEvent, FakeStream  # noqa: E402

KERNEL_STREAM = 0x5EED
H, W = 64, 96
# (file name, make_video keywords): every codec and container the issue names
MEDIA = [
    ("h264_bframes.mp4", dict(n=30, codec="libx264", bframes=2)),
    ("hevc.mkv", dict(n=24, codec="libx265", container="matroska",
                      options={"preset": "ultrafast", "x265-params": "log-level=none"})),
    ("vp9.mkv", dict(n=20, codec="libvpx-vp9", container="matroska")),
    ("av1.mp4", dict(n=20, codec="libsvtav1", options={"preset": "12"})),
    ("mpeg4.avi", dict(n=26, codec="mpeg4", container="avi", bframes=0)),
    ("vfr.mp4", dict(n=20, codec="libx264", pts_ms=np.cumsum([0] + [40, 40, 80] * 7)[:20])),
    ("rotated.mp4", dict(n=22, codec="libx264", rotation=90)),
    ("short.mp4", dict(n=5, codec="libx264")),
    ("packed.avi", dict(n=30, packed=True)),
]
VFR, PACKED = 5, 8
REFUSED = "VP9"  # the fake GPU's decoder refuses it


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nvdec")
    made = []
    for name, kw in MEDIA:
        kw = {"height": H, "width": W, "gop": 6, **kw}
        if kw.get("rotation"):
            kw["height"], kw["width"] = W, H
        if kw.pop("packed", False):
            made.append((name, make_asp_avi(kw["n"], H, W, packed=True)))
            continue
        made.append((name, make_video(**kw)))
    return convert_videos(folder, made, shard_size="60KB")


class FakeNvc:
    """The calls of PyNvVideoCodec the backend makes. Frames are flat pictures of `level(k)`
    at the coded size; every decoder's requests are recorded by sample."""

    OutputColorType = type("OutputColorType", (), {"RGB": "rgb"})

    def __init__(self, samples: dict[str, int], refuse=(REFUSED,)):
        self.samples, self.refuse = samples, set(refuse)
        self.asked: dict[int, list[list[int]]] = {}
        self.decoders = 0
        self.reconfigured = 0

    @staticmethod
    def _probe(data: bytes) -> tuple[str, int, int, int]:
        import av

        with av.open(io.BytesIO(data)) as c:
            stream = c.streams.video[0]
            n = sum(1 for _ in c.decode(stream))
            ctx = stream.codec_context
            return ctx.name.upper(), n, ctx.height, ctx.width

    def CreateDemuxer(self, feed):  # noqa: N802 (PyNvVideoCodec's spelling)
        chunks, buffer = [], bytearray(4096)
        while (n := feed(buffer)) > 0:
            chunks.append(bytes(buffer[:n]))
        codec = self._probe(b"".join(chunks))[0]
        return type("Demuxer", (), {"GetNvCodecId": lambda s: codec,
                                    "ChromaFormat": lambda s: "420", "BitDepth": lambda s: 8})()

    def GetDecoderCaps(self, gpuid, codec, chromaformat, bitdepth):  # noqa: N802
        if codec in self.refuse:
            return {"num_decoder_engines": 0, "width_max": 0, "height_max": 0}
        return {"num_decoder_engines": 7, "width_max": 8192, "height_max": 8192,
                "width_min": 48, "height_min": 16, "mb_num_max": 1 << 20}

    def SimpleDecoder(self, source, **kwargs):  # noqa: N802
        nvc = self
        nvc.decoders += 1
        nvc.made_with = kwargs

        class Decoder:
            def __init__(self):
                self.kwargs = kwargs
                self._load(source)

            def _load(self, data):
                data = bytes(data)
                self.sample = nvc.samples[hashlib.sha1(data).hexdigest()]
                _, self.n, self.h, self.w = nvc._probe(data)

            def reconfigure_decoder(self, data):
                nvc.reconfigured += 1
                self._load(data)

            def __len__(self):
                return self.n

            def get_batch_frames_by_index(self, indices):
                nvc.asked.setdefault(self.sample, []).append(list(indices))
                return [np.full((self.h, self.w, 3), level(k), np.uint8) for k in indices]

        return Decoder()


def _nearest_resize(sources, boxes, flips, out, *, layout, mean, std, stream):
    """The kernel's contract on the CPU: box (y0, x0, h, w) of each source to out's H x W."""
    assert layout == "NCHW" and stream.cuda_stream == KERNEL_STREAM
    _, _, oh, ow = out.shape
    for b, (src, (y0, x0, bh, bw)) in enumerate(zip(sources, boxes, strict=True)):
        pixels = src.numpy()
        ys = np.clip((y0 + (np.arange(oh) + 0.5) * bh / oh).astype(int), 0, pixels.shape[0] - 1)
        xs = np.clip((x0 + (np.arange(ow) + 0.5) * bw / ow).astype(int), 0, pixels.shape[1] - 1)
        window = torch.from_numpy(pixels[ys][:, xs].transpose(2, 0, 1).copy())
        if out.dtype == torch.uint8:
            out[b] = window
        else:
            out[b] = (window.float() / 255 - torch.tensor(mean).view(3, 1, 1)) / \
                torch.tensor(std).view(3, 1, 1)


@pytest.fixture
def fake(videos, monkeypatch):
    """The fake PyNvVideoCodec and CUDA patched into the backend; returns (nvc, log)."""
    ds = open_dataset(videos)
    views = ds.views(np.arange(len(ds)), "video")
    samples = {hashlib.sha1(bytes(np.asarray(v))).hexdigest(): i for i, v in enumerate(views)}
    nvc = FakeNvc(samples)
    log: list = []
    streams = iter(range(0x1001, 0x2000))
    monkeypatch.setattr(nvdec, "import_nvc", lambda: nvc)
    monkeypatch.setattr(nvdec, "_new_stream", lambda device_id: FakeStream(log, next(streams)))
    monkeypatch.setattr(nvdec, "_new_event", lambda: FakeEvent(log, "decoded"))
    monkeypatch.setattr(nvdec, "_on_stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(nvdec, "_keep_until",
                        lambda tensor, stream: log.append(("keep", None, stream.cuda_stream)))
    monkeypatch.setattr(nvdec, "_current_stream", lambda target: FakeStream(log, KERNEL_STREAM))
    monkeypatch.setattr(nvdec, "create", lambda spec: nvdec.NvdecVideoProducer(spec, 0))
    monkeypatch.setattr(chute.kernels, "resize_normalize", _nearest_resize)
    return nvc, log


def _clips(path, backend, **kw):
    options = dict(num_frames=4, frame_interval=4, size=(32, 32), dtype="uint8", backend=backend)
    options.update(kw.pop("options", {}))
    with Pipeline(path, 4, device="cpu", seed=5, augment=kw.pop("augment", "train"),
                  drop_last=False,
                  fields={"video": VideoOptions(**options)}, **kw) as pipe:
        clips = {int(i): v.clone() for b in pipe
                 for i, v in zip(b["index"].tolist(), b["video"], strict=True)}
        return clips, pipe.stats


def _levels(clip: torch.Tensor) -> list[float]:
    # [3, T, H, W]: the green channel at the centre bottom (below the red band) is level(k)
    return [float(clip[1, t, -2, clip.shape[3] // 2]) for t in range(clip.shape[1])]


def test_the_frames_asked_of_the_decoder_are_the_cpu_backends_selection(videos, fake,
                                                                        monkeypatch):
    nvc, _ = fake
    cpu_asked: dict[int, list[int]] = {}
    real = VideoProducer._clip

    def record(self, job):
        cpu_asked[job[3]] = np.asarray(job[4]).tolist()
        return real(self, job)

    monkeypatch.setattr(VideoProducer, "_clip", record)
    _clips(videos, "cpu")
    cpu = dict(cpu_asked)
    cpu_asked.clear()
    _clips(videos, "nvdec")
    refused = {i for i, (name, _) in enumerate(MEDIA) if name.startswith("vp9")} | {VFR, PACKED}
    assert set(nvc.asked) == set(range(len(MEDIA))) - refused
    for i, asked in nvc.asked.items():
        assert asked == [sorted(set(cpu[i]))], MEDIA[i][0]
    # the refused and variable-rate videos went to the cpu backend, with its own selection
    assert {i: cpu_asked[i] for i in refused} == {i: cpu[i] for i in refused}


@pytest.mark.parametrize("augment, options", [
    ("train", {}),
    ("eval", {"layout": "TCHW", "dtype": "float32"}),
    ("train", {"crop": "random", "frame_interval": 2, "size": (24, 40)}),
])
def test_nvdec_clips_equal_the_cpu_backends(videos, fake, augment, options):
    cpu, _ = _clips(videos, "cpu", augment=augment, options=options)
    gpu, _ = _clips(videos, "nvdec", augment=augment, options=options)
    assert cpu.keys() == gpu.keys() == set(range(len(MEDIA)))
    for i in cpu:
        a, b = cpu[i], gpu[i]
        assert a.shape == b.shape and a.dtype == b.dtype, MEDIA[i][0]
        if options.get("layout") == "TCHW":
            a, b = a.transpose(0, 1), b.transpose(0, 1)
        got, want = np.array(_levels(b)), np.array(_levels(a))
        if a.dtype != torch.uint8:  # float clips are x / 127.5 - 1: compared in levels
            got, want = (got + 1) * 127.5, (want + 1) * 127.5
        assert np.allclose(got, want, atol=4), (MEDIA[i][0], got, want)


def test_a_codec_the_decoder_refuses_falls_back_per_sample_counted_and_said_once(
        videos, fake, caplog):
    with caplog.at_level(logging.WARNING, logger="chute"):
        _, stats = _clips(videos, "nvdec", augment="eval", options={"num_frames": 2})
    counts = stats.stages.as_dict()["counts"]
    # one clip of each: the VP9 video, the variable-rate one and the packed AVI
    assert counts["video/nvdec:cpu:VP9"] == 1
    assert counts["video/nvdec:cpu:variable frame rate"] == 1
    assert counts["video/nvdec:cpu:packed MPEG-4 B-frames"] == 1
    said = [r.getMessage() for r in caplog.records if "'nvdec'" in r.getMessage()]
    assert len(said) == 3, said  # one line per reason, not per clip or batch
    assert "VP9: no decoder engine takes it" in " ".join(said)


def test_sessions_are_kept_across_batches_and_epochs(videos, fake):
    nvc, _ = fake
    options = VideoOptions(num_frames=4, frame_interval=4, size=(32, 32), backend="nvdec",
                           threads=1)
    with Pipeline(videos, 2, device="cpu", seed=1, drop_last=False,
                  fields={"video": options}) as pipe:
        for epoch in range(2):
            pipe.set_epoch(epoch)
            for _ in pipe:
                pass
    decoded = 2 * (len(MEDIA) - 3)
    assert nvc.decoders == 1 and nvc.reconfigured == decoded - 1
    made = nvc.made_with  # frames in device memory, RGB, on the worker's own stream
    assert made["use_device_memory"] and made["output_color_type"] == "rgb"
    assert made["cuda_stream"] not in (0, KERNEL_STREAM) and made["gpu_id"] == 0


def test_the_kernel_waits_for_each_clips_decode_and_keeps_its_frames(videos, fake):
    _, log = fake
    _clips(videos, "nvdec", options={"num_frames": 2})
    waits = [e for e in log if e[0] == "wait"]
    keeps = [e for e in log if e[0] == "keep"]
    records = [e for e in log if e[0] == "record"]
    assert waits and all(stream == KERNEL_STREAM for _, _, stream in waits)
    assert len(keeps) == len(waits) == len(records) == len(MEDIA) - 3
    assert all(stream != KERNEL_STREAM for _, _, stream in records)  # decoded on the workers


def test_frame_request_asks_each_frame_once_and_gathers_repeats():
    wanted, gather = frame_request([3, 7, 11, 11, 11])
    assert wanted == [3, 7, 11] and gather.tolist() == [0, 1, 2, 2, 2]


@pytest.mark.parametrize("coded, rotation, size, crop", [
    ((48, 64), 0, (32, 32), None), ((48, 64), 90, (32, 20), (0.3, 0.9)),
    ((720, 1280), 180, (256, 256), (0.99, 0.0)), ((30, 40), 270, None, None)])
def test_clip_box_is_the_cpu_backends_window(coded, rotation, size, crop):
    from chute.fallbacks import fill_and_crop

    y0, x0, bh, bw = clip_box(coded, rotation, size, crop)
    shown = coded[::-1] if rotation in (90, 270) else coded
    if size is None:
        assert (y0, x0, bh, bw) == (0, 0, *shown)
        return
    fill, top, left = fill_and_crop(*coded, rotation, size, crop)
    fill = fill[::-1] if rotation in (90, 270) else fill
    # the window, scaled to the fill size, is the cpu backend's crop of the filled frame
    assert np.allclose((y0 * fill[0] / shown[0], x0 * fill[1] / shown[1],
                        bh * fill[0] / shown[0], bw * fill[1] / shown[1]),
                       (top, left, *size))
    assert y0 + bh <= shown[0] + 1e-6 and x0 + bw <= shown[1] + 1e-6


def test_caps_refusals_name_what_is_out_of_range():
    caps = {"num_decoder_engines": 7, "width_max": 4096, "height_max": 2304, "width_min": 48,
            "height_min": 16, "mb_num_max": 36864}
    assert caps_refusal(caps, 1080, 1920) is None
    assert "over" in caps_refusal(caps, 4320, 7680)
    assert "under" in caps_refusal(caps, 8, 32)
    assert "no decoder engine" in caps_refusal({**caps, "num_decoder_engines": 0}, 64, 64)
    assert "no capabilities" in caps_refusal({}, 64, 64)


def test_nvdec_on_the_cpu_device_is_refused_in_one_line(videos):
    with pytest.raises(BackendUnavailableError, match="nvdec.*device='cuda'.*backend='cpu'"):
        Pipeline(videos, 2, device="cpu",
                 fields={"video": VideoOptions(backend="nvdec")}).close()


def test_a_host_buffer_is_refused_in_one_line():
    with pytest.raises(TypeError, match="CUDA tensor, not a ndarray"):
        nvdec._current_stream(np.zeros((1, 3, 2, 4, 4), np.uint8))


@pytest.mark.gpu
def test_real_nvdec_clips_match_the_cpu_backend(videos):
    pytest.importorskip("PyNvVideoCodec")
    from chute._device import cuda_device_count

    if not cuda_device_count():
        pytest.skip("no CUDA device")
    cpu, _ = _clips(videos, "cpu", augment="eval")
    with Pipeline(videos, 3, device="cuda", seed=5, augment="eval",
                  fields={"video": VideoOptions(num_frames=4, frame_interval=4, size=(32, 32),
                                                backend="nvdec")}) as pipe:
        gpu = {int(i): v.cpu() for b in pipe
               for i, v in zip(b["index"].tolist(), b["video"], strict=True)}
    for i in cpu:
        assert np.allclose(_levels(gpu[i]), _levels(cpu[i]), atol=3), MEDIA[i][0]


def test_auto_measures_nvdec_only_where_it_imports_and_a_cuda_device_is_there(monkeypatch):
    from chute.pipelines.producers.video._auto import candidates

    def nvdec_of(device):
        return next(c for c in candidates(device) if c.backend == "nvdec")

    assert not nvdec_of("cpu").available and "device is the CPU" in nvdec_of("cpu").reason
    monkeypatch.setattr(nvdec, "import_nvc", lambda: FakeNvc({}))
    monkeypatch.setattr(nvdec, "cuda_device_count", lambda: 0)
    assert nvdec_of("cuda").reason == "no CUDA device"
    monkeypatch.setattr(nvdec, "cuda_device_count", lambda: 1)
    assert nvdec_of("cuda").available


def test_without_pynvvideocodec_the_reason_says_what_to_install():
    try:
        import PyNvVideoCodec  # noqa: F401
    except Exception:
        pass
    else:
        pytest.skip("PyNvVideoCodec imports here")
    why = nvdec.nvdec_import_error()
    assert why is not None and "pip install 'chute[gpu-cu13]'" in why and "\n" not in why


def test_under_buckets_nvdec_clips_equal_the_cpu_backends(videos, fake):
    from chute.pipelines import Buckets

    def run(backend):
        opts = VideoOptions(frame_interval=2, dtype="uint8", backend=backend)
        with Pipeline(videos, batch_size=None, device="cpu", seed=2, fields={"video": opts},
                      batching=Buckets({"32x32": {12: (1.0, 2), 3: (1.0, 3)}}),
                      drop_last=False) as pipe:
            return [(b["index"].tolist(), b["video"].clone(), b["clip_height"].tolist())
                    for b in pipe]

    cpu, gpu = run("cpu"), run("nvdec")
    assert [b[0] for b in cpu] == [b[0] for b in gpu] and [b[2] for b in cpu] == \
        [b[2] for b in gpu]
    assert [b[1].shape for b in cpu] == [b[1].shape for b in gpu]
    assert len({b[1].shape[2:] for b in gpu}) == 2  # both buckets' frame counts and sizes
    for (_, a, _), (_, b, _) in zip(cpu, gpu, strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.allclose(_levels(x), _levels(y), atol=4)
