"""The producer contract (chute/pipelines/producers/_contract.py), checked on every registered
producer plus a test-only one, with the same assertions for all."""

from __future__ import annotations

import importlib.util
import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from chute._device import cuda_device_count
from chute.convert import ShardWriter
from chute.pipelines import (
    PRODUCERS,
    BatchPlan,
    CropConfig,
    ImageSpec,
    ProducerSpec,
    create_producer,
    nvdec_import_error,
)
from chute.pipelines.producers._registry import IMAGE_BACKENDS
from chute.readers import DatasetRef, open_dataset
from tests.pipelines._pipeline_data import latent_of, write_dataset

N, BATCH = 23, 4  # eval epochs end with a short batch of 3
SIZE = (16, 20)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOLERANCE = 1.0  # mean |difference| of decoded images, 0..255 units
TEST_ONLY = {"test-ids": "tests.pipelines._id_backend"}
_HAVE_SOUNDFILE = importlib.util.find_spec("soundfile") is not None


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    mixed = open_dataset(write_dataset(root / "mixed", n=N, latent_shape=(4, 8, 8),
                                       sizes=(20, 40)))
    with ShardWriter(root / "ragged", {"seq": {"kind": "ndarray", "ragged": True,
                                               "compression": "zstd"}},
                     shard_size="1KiB") as w:
        for i in range(N):
            w.write({"seq": _ragged_of(i)})
    found = {"mixed": mixed, "ragged": open_dataset(root / "ragged")}
    if importlib.util.find_spec("av") is not None:
        from tests.pipelines.producers.video.test_producer_video import write_videos

        folder = root / "videos"
        folder.mkdir()
        found["video"] = open_dataset(write_videos(folder, frames=[6 + i % 5 for i in range(N)]))
        if importlib.util.find_spec("nvidia.dali") is not None:
            from tests.pipelines._dali_video_data import write_codec_videos

            found["video-vp9"] = open_dataset(write_codec_videos(
                root / "vp9", frames=[6 + i % 5 for i in range(N)], sizes=[(32, 48)],
                rotated=None))
    if _HAVE_SOUNDFILE:
        found["audio"] = _audio_dataset(root / "audio")
    if importlib.util.find_spec("zarr") is not None:
        from tests.readers._zarr_stores import write_store

        found["zarr"] = open_dataset(write_store(root / "x.zarr", LATENTS, chunk=4),
                                     sample_array="base_frames")
    return found


def _latents():
    from tests.readers._zarr_stores import latents_values

    return latents_values(N, 5)


LATENTS = _latents() if importlib.util.find_spec("zarr") is not None else None


def _audio_dataset(path):
    """N short WAV recordings of different lengths."""
    import soundfile as sf

    from chute.convert._convert_audio import AUDIO_FIELDS

    with ShardWriter(path, AUDIO_FIELDS, shard_size="4KiB") as w:
        for i in range(N):
            wav = io.BytesIO()
            sf.write(wav, _pcm_of(i), 8000, format="WAV", subtype="PCM_16")
            w.write({"audio": wav.getvalue(), "sample_rate": 8000, "channels": 1,
                     "num_frames": len(_pcm_of(i)), "duration": len(_pcm_of(i)) / 8000,
                     "meta": {"key": str(i), "segments": []}})
    return open_dataset(path)


def _pcm_of(i: int) -> np.ndarray:
    return (np.arange(100 + 37 * i, dtype=np.int16) * (i + 1)).astype(np.int16)


def _audio_ref(ds, request):
    rows = [_pcm_of(int(i)).astype(np.float32) / 32768 for i in request.ids]
    padded = np.zeros((len(rows), max(len(r) for r in rows)), np.float32)
    for k, r in enumerate(rows):
        padded[k, :len(r)] = r
    return {"audio": padded, "audio_lengths": np.array([len(r) for r in rows]),
            "audio_segment": [{"key": str(i), "txt": "", "start": 0.0, "end": len(r) / 8000,
                               "index": -1}
                              for i, r in zip(request.ids, rows, strict=True)]}


def _ragged_of(i: int) -> np.ndarray:
    return np.arange((i % 5 + 1) * 3, dtype=np.float32).reshape(-1, 3) + i


@dataclass
class Case:
    spec: Any
    reference: Any  # (dataset, request) -> {key: expected}
    tolerance: float = 0.0


def _image_reference(ds, request):
    from tests.pipelines._dali_data import pil_reference

    return {"image": pil_reference(ds, request.ids, request.params["boxes"],
                                   request.params["flips"], SIZE)}


def _ids_reference(ds, request):
    return {"image": np.broadcast_to(request.ids.reshape(-1, 1, 1, 1).astype(np.uint8),
                                     (len(request.ids), *SIZE, 3))}


def _case(name: str, datasets) -> Case:
    mixed = datasets["mixed"]
    common = dict(batch_size=BATCH, device="cpu", prefetch=2)
    if name in IMAGE_BACKENDS or name in TEST_ONLY:
        spec = ImageSpec(name, "image", mixed, options={}, size=SIZE, dtype="uint8",
                         layout="NHWC", mean=MEAN, std=STD, crop=CropConfig(SIZE), **common)
        ref = _ids_reference if name in TEST_ONLY else _image_reference
        return Case(spec, ref, 0.0 if name in TEST_ONLY else TOLERANCE)
    if name == "ndarray":
        return Case(ProducerSpec(name, "latent", mixed, **common),
                    lambda ds, r: {"latent": np.stack([latent_of(int(i)) for i in r.ids])})
    if name == "video":
        return Case(ProducerSpec(name, "video", datasets["video"], options=dict(VIDEO),
                                 **common), _video_ref)
    if name == "video-dali":  # DALI's CPU mode: a VP9 twin of the video dataset
        return Case(ProducerSpec(name, "video", datasets["video-vp9"], options=dict(VIDEO),
                                 **common), _video_ref, VIDEO_DALI_TOLERANCE)
    if name == "video-nvdec":  # NVDEC writes CUDA tensors; YUV -> RGB within 2 levels
        return Case(ProducerSpec(name, "video", datasets["video"], options=dict(VIDEO),
                                 **{**common, "device": "cuda:0"}), _video_ref,
                    VIDEO_DALI_TOLERANCE)
    if name == "ndarray-ragged":
        return Case(ProducerSpec("ndarray", "seq", datasets["ragged"], **common), _ragged_ref)
    if name == "scalar":
        return Case(ProducerSpec(name, "label", mixed, **common),
                    lambda ds, r: {"label": 1000 + r.ids})
    if name == "json":
        return Case(ProducerSpec(name, "meta", mixed, **common),
                    lambda ds, r: {"meta": [{"id": int(i)} for i in r.ids]})
    if name == "bytes":
        return Case(ProducerSpec(name, "image", mixed, **common),
                    lambda ds, r: {"image": [bytes(ds[int(i)]["image"]) for i in r.ids]})
    if name == "lookup":
        return Case(ProducerSpec(name, "clip_emb", datasets["zarr"],
                                 options={"index": "segment_to_video"}, **common),
                    lambda ds, r: {"clip_emb": LATENTS["clip_emb"][
                        LATENTS["segment_to_video"][r.ids]]})
    if name == "audio":
        return Case(ProducerSpec(name, "audio", datasets["audio"], **common), _audio_ref)
    raise AssertionError(f"no contract case for producer {name!r}; add one")


VIDEO = {"num_frames": 3, "frame_interval": 2, "size": None}
VIDEO_DALI_TOLERANCE = 2.0  # DALI's YUV -> RGB is not FFmpeg's (issue 15's bound)


def _video_ref(ds, request):
    import io

    import av

    from chute.pipelines.producers.video._clips import clip_indices

    clips = []
    for i, start in zip(request.ids.tolist(), request.params["clip_start"].tolist(),
                        strict=True):
        with av.open(io.BytesIO(ds[i]["video"].tobytes())) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        picked = clip_indices(start, VIDEO["num_frames"], VIDEO["frame_interval"], len(frames))
        clips.append(np.stack([frames[f] for f in picked]).transpose(3, 0, 1, 2))
    return {"video": np.stack(clips)}


def _ragged_ref(ds, request):
    rows = [_ragged_of(int(i)) for i in request.ids]
    longest = max(len(r) for r in rows)
    padded = np.zeros((len(rows), longest, 3), np.float32)
    for k, r in enumerate(rows):
        padded[k, :len(r)] = r
    return {"seq": padded, "seq_lengths": np.array([len(r) for r in rows])}


def _names() -> list:
    names = []
    for name in sorted(PRODUCERS) + ["ndarray-ragged", *TEST_ONLY]:
        marks = []
        if name == "dali" and cuda_device_count() == 0:
            marks.append(pytest.mark.skip(reason="backend 'dali' runs a CUDA kernel: no GPU"))
        if name == "lookup" and importlib.util.find_spec("zarr") is None:
            marks.append(pytest.mark.skip(reason="zarr not installed (pip install chute[zarr])"))
        if name.startswith("video") and importlib.util.find_spec("av") is None:
            marks.append(pytest.mark.skip(reason="PyAV not installed"))
        if name == "nvimgcodec" and importlib.util.find_spec("nvidia.nvimgcodec") is None:
            marks.append(pytest.mark.skip(reason="nvidia-nvimgcodec not installed"))
        if name == "video-nvdec" and (why := nvdec_import_error()) is not None:
            # a fake decoder drives it on the CPU: producers/video/test_producer_video_nvdec.py
            marks.append(pytest.mark.skip(reason=f"nvdec cannot run here: {why}"))
        if "dali" in name and importlib.util.find_spec("nvidia.dali") is None:
            marks.append(pytest.mark.skip(reason="nvidia-dali not installed"))
        if name == "audio" and not _HAVE_SOUNDFILE:
            marks.append(pytest.mark.skip(reason="soundfile not installed (chute[audio])"))
        names.append(pytest.param(name, marks=marks, id=name))
    return names


@pytest.fixture(params=_names())
def case(request, datasets, monkeypatch):
    for name, module in TEST_ONLY.items():
        monkeypatch.setitem(PRODUCERS, name, module)
    return _case(request.param, datasets)


def _plan(case: Case, drop_last=False) -> BatchPlan:
    ds = case.spec.dataset
    producer = create_producer(case.spec)
    params = producer.param_sources()
    producer.close()
    return BatchPlan(DatasetRef.of(ds), len(ds), 5, 0, 0, 1, BATCH, drop_last, 0, params)


SENTINEL = object()


def _out(producer, request):
    """This batch's outputs, every row pre-filled with a sentinel."""
    shapes = producer.shapes(request)
    outputs = producer.outputs()
    out = {}
    for key, shape in shapes.items():
        dtype = outputs[key].dtype
        out[key] = [SENTINEL] * shape[0] if dtype is None else np.full(shape, 77, dtype)
    return out


def _read_all(producer, plan, first=0):
    epoch = producer.open_epoch(plan, first)
    results = []
    for it in range(first, len(plan)):
        request = plan.request(it)
        request = replace(request, shapes=producer.shapes(request))
        out = _out(producer, request)
        status = epoch.read(request, out)
        results.append((request, out, status))
    epoch.close()
    return results


def _assert_matches(case: Case, request, out):
    for key, want in case.reference(case.spec.dataset, request).items():
        got = out[key]
        if isinstance(want, list):
            assert [bytes(g) if isinstance(g, np.ndarray) else g for g in got] == want, key
        elif case.tolerance:
            assert np.abs(got.astype(float) - want.astype(float)).mean() <= case.tolerance, key
        else:
            np.testing.assert_array_equal(got, want, err_msg=key)


def test_every_row_written_status_and_values(case):
    producer = create_producer(case.spec)
    plan = _plan(case)
    results = _read_all(producer, plan)
    assert len(results) == -(-N // BATCH)
    assert len(results[-1][0].ids) == N % BATCH  # the short last batch
    for request, out, status in results:
        status = np.asarray(status)
        assert status.dtype == np.uint8 and status.shape == (len(request.ids),)
        assert not status.any()
        for key, value in out.items():
            assert len(value) == len(request.ids)
            if isinstance(value, list):
                assert not any(v is SENTINEL for v in value), key
            else:
                assert not np.all(value.reshape(len(value), -1) == 77, axis=1).any(), key
        _assert_matches(case, request, out)
    producer.close()
    producer.close()  # idempotent


def test_reads_out_of_order_raise(case):
    producer = create_producer(case.spec)
    plan = _plan(case)
    epoch = producer.open_epoch(plan, 0)
    request = plan.request(1)
    with pytest.raises(Exception, match="in order"):
        epoch.read(request, _out(producer, request))
    epoch.close()
    epoch.close()
    producer.close()


def test_open_epoch_at_k_equals_reading_from_0_and_skipping_k(case):
    producer = create_producer(case.spec)
    plan = _plan(case, drop_last=True)
    full = _read_all(producer, plan)
    resumed = _read_all(producer, plan, first=2)
    assert len(resumed) == len(full) - 2
    for (_, want, _), (_, got, _) in zip(full[2:], resumed, strict=True):
        for key in want:
            if isinstance(want[key], list):
                assert [bytes(x) if isinstance(x, np.ndarray) else x for x in got[key]] == \
                    [bytes(x) if isinstance(x, np.ndarray) else x for x in want[key]]
            else:
                np.testing.assert_array_equal(got[key], want[key])
    producer.close()


def test_unknown_options_raise(case):
    with pytest.raises(ValueError, match="no_such_option"):
        create_producer(replace(case.spec, options={"no_such_option": 1}))


def test_stored_producers_read_their_options_dataclass_whose_defaults_are_the_only_ones():
    # issue 39: the family hands the options dataclass itself to the producer; a hand-built
    # dict is converted once, so a default is written only on the dataclass
    from chute.pipelines import ArrayOptions, Lookup
    from chute.pipelines.producers._contract import ProducerSpec, typed_options

    def spec(name, options):
        return ProducerSpec(name, "x", None, 4, options=options)

    given = ArrayOptions(dtype="float16")
    assert typed_options(spec("ndarray", given), ArrayOptions) is given
    assert typed_options(spec("ndarray", {}), ArrayOptions) == ArrayOptions()
    assert typed_options(spec("lookup", {"index": "i"}), Lookup) == Lookup("i")
    with pytest.raises(ValueError, match=r"unknown options \['size'\] for producer 'ndarray'"):
        typed_options(spec("ndarray", {"size": 3}), ArrayOptions)
    with pytest.raises(ValueError, match=r"producer 'lookup' of field 'x' needs options "
                                         r"\['index'\]"):
        typed_options(spec("lookup", {}), Lookup)
    with pytest.raises(TypeError, match="takes Lookup or a dict of its options, got "
                                        "ArrayOptions"):
        typed_options(spec("lookup", given), Lookup)
