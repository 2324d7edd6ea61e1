"""The audio producer: chute/pipelines/producers/audio/_producer.py. Every delivered segment must
equal soundfile's own read of the source file (exactly for FLAC and WAV), through both decode paths:
the native one-call decoder (chute/fallbacks/_audio_segment.py) and soundfile's file objects
(where the shim cannot be built)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chute.pipelines import ProducerSpec, create_producer
from chute.readers import open_dataset
from tests._audio import RECORDINGS, convert_recordings, segments_of

sf = pytest.importorskip("soundfile")
soxr = pytest.importorskip("soxr")
NAMES = list(RECORDINGS)


@pytest.fixture(autouse=True, params=["native", "soundfile"])
def decode_path(request, monkeypatch):
    from chute.fallbacks import _audio_segment
    from chute.pipelines.producers.audio import _producer as _producer_audio

    if request.param == "native":
        status = _audio_segment.segment_decoder_status()
        if not status.available:
            pytest.skip(f"native segment decoder unavailable: {status.reason}")
    else:
        monkeypatch.setattr(_producer_audio, "segment_decoder_status",
                            lambda: _audio_segment.SegmentDecoderStatus(False, None, "test"))
    return request.param


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return open_dataset(convert_recordings(tmp_path_factory.mktemp("audio")))


def _batch(producer, ids):
    params = {}  # what the Pipeline asks the producer's param sources (unit, perturbation)
    for source in producer.param_sources():
        params |= source(0, 0, np.asarray(ids, np.int64))
    from chute.pipelines import BatchRequest

    request = BatchRequest(0, np.asarray(ids, np.int64), params)
    request = replace(request, shapes=producer.shapes(request))
    dtypes = {k: o.dtype for k, o in producer.outputs().items()}
    out = {k: [None] * s[0] if dtypes[k] is None else np.full(s, 7, dtypes[k])
           for k, s in request.shapes.items()}
    return request, out, producer.fill(request, out)


def _source(ds, rec, seg):
    """soundfile.read of the source, as the issue states the expectation."""
    name = NAMES[rec]
    rate = RECORDINGS[name][1]
    s = segments_of(name)[seg]
    path = ds.path.parent / name
    return sf.read(path, start=round(s["start"] * rate), stop=round(s["end"] * rate),
                   always_2d=True)[0]


def test_segments_equal_soundfile_read_of_the_source(ds):
    mono_16k = [0, 1]  # a.wav, b.flac
    for rec in mono_16k:
        producer = create_producer(ProducerSpec(
            "audio", "audio", ds, 12, options={"unit": "segment", "sample_rate": 16000}))
        ids = np.arange(3 * rec, 3 * rec + 3)
        request, out, status = _batch(producer, ids)
        assert not status.any()
        for row, seg in enumerate(range(3)):
            want = _source(ds, rec, seg)[:, 0]
            n = out["audio_lengths"][row]
            assert n == len(want)
            np.testing.assert_array_equal(out["audio"][row, :n], want)
            assert not out["audio"][row, n:].any()  # zero padding
        producer.close()


def test_stereo_kept_or_mixed_down_and_resampled(ds, tmp_path):
    with pytest.raises(ValueError, match="mixes channel counts"):
        create_producer(ProducerSpec("audio", "audio", ds, 4, options={
            "mono": False, "sample_rate": 16000}))
    stereo = open_dataset(convert_recordings(tmp_path, names=("c.flac",)))
    keep = create_producer(ProducerSpec("audio", "audio", stereo, 4, options={
        "unit": "segment", "mono": False, "threads": 2}))
    request, out, status = _batch(keep, [0, 2])  # c.flac: 22050 Hz stereo, no resampling
    assert not status.any() and out["audio"].shape == (2, 2, 22050)
    for row, seg in enumerate((0, 2)):
        want = _source(ds, 2, seg).astype(np.float32).T
        np.testing.assert_array_equal(out["audio"][row, :, :want.shape[1]], want)
    keep.close()
    mono = create_producer(ProducerSpec("audio", "audio", ds, 4, options={"sample_rate": 16000}))
    request, out, status = _batch(mono, [3])  # d.wav: 8000 Hz stereo -> 16 kHz mono
    source = sf.read(ds.path.parent / "d.wav", always_2d=True, dtype="float32")[0]
    want = soxr.resample(source.mean(axis=1, dtype=np.float32), 8000, 16000)
    assert out["audio_lengths"][0] == len(want) == 11200
    np.testing.assert_allclose(out["audio"][0, :len(want)], want, atol=1e-6)


def test_corrupt_frame_and_rate_mismatch_fail_the_sample_only(tmp_path):
    folder = convert_recordings(tmp_path)
    flac = folder / "00000" / "audio.bin"
    raw = bytearray(flac.read_bytes())
    offset = (tmp_path / "a.wav").stat().st_size  # b.flac is stored right after a.wav
    size = (tmp_path / "b.flac").stat().st_size
    raw[offset + size // 2:offset + size // 2 + 400] = bytes(400)  # b.flac, mid-file
    flac.write_bytes(bytes(raw))
    ds = open_dataset(folder)
    producer = create_producer(ProducerSpec("audio", "audio", ds, 4, options={
        "unit": "segment", "sample_rate": 16000}))
    _, _, status = _batch(producer, [0, 5])  # a.wav intact; b.flac's last segment spans it
    assert status.tolist() == [0, 1]
    # a rate column that disagrees with the bytes never yields a (wrongly timed) slice
    producer.rates = producer.rates.copy()
    producer.rates[0] = 8000
    _, _, status = _batch(producer, [0])
    assert status.tolist() == [1]
    producer.rates[0] = 16000
    producer.file_channels = producer.file_channels.copy()
    producer.file_channels[0] = 2  # a channel column that disagrees with the bytes
    _, _, status = _batch(producer, [0, 1])
    assert status.tolist() == [1, 1]


@pytest.mark.parametrize("fmt, subtype", [("MP3", "MPEG_LAYER_III"), ("OGG", "VORBIS")])
def test_lossy_formats_equal_soundfile_read_of_the_source(tmp_path, fmt, subtype):
    # MP3 and OGG/Vorbis are stored as they are too; their segments are what libsndfile decodes
    # from the source file at those frames
    import json

    from chute.convert import AudioConvertOptions, convert_audio

    if fmt not in sf.available_formats():
        pytest.skip(f"this libsndfile cannot write {fmt}")
    rate = 22050
    t = np.arange(rate * 3) / rate
    signal = (0.3 * np.sin(2 * np.pi * 440 * t) * np.linspace(0.2, 1, t.size)).astype(np.float32)
    path = tmp_path / f"r.{fmt.lower()}"
    sf.write(path, signal, rate, format=fmt, subtype=subtype)
    segments = [{"start": 0.25, "end": 1.1}, {"start": 1.5, "end": 2.9}]
    (tmp_path / "r.jsonl").write_text(json.dumps({"key": "r", "path": path.name,
                                                  "info": {"segments": segments}}) + "\n")
    convert_audio(tmp_path / "r.jsonl", tmp_path / "ds",
                  AudioConvertOptions(workers=1, progress=False))
    producer = create_producer(ProducerSpec("audio", "audio", open_dataset(tmp_path / "ds"), 2,
                                            options={"unit": "segment"}))
    _, out, status = _batch(producer, [0, 1])
    assert not status.any()
    for row, s in enumerate(segments):
        want = sf.read(path, start=round(s["start"] * rate), stop=round(s["end"] * rate),
                       dtype="float32", always_2d=True)[0][:, 0]
        n = out["audio_lengths"][row]
        assert n == len(want)
        np.testing.assert_array_equal(out["audio"][row, :n], want)
    producer.close()


def test_mixed_rates_without_resampling_keep_each_recordings_rate(ds):
    # recordings of 8, 16 and 22.05 kHz in one dataset, resampling off: every segment is its
    # source's frames at the source's rate (said by a warning), never refused or resampled
    with pytest.warns(UserWarning, match=r"mixes sample rates \[8000, 16000, 22050\]"):
        producer = create_producer(ProducerSpec("audio", "audio", ds, 12,
                                                options={"unit": "segment"}))
    request, out, status = _batch(producer, np.arange(12))
    assert not status.any()
    for k in range(12):
        want = _source(ds, k // 3, k % 3).astype(np.float32)
        want = want.mean(axis=1, dtype=np.float32) if want.shape[1] > 1 else want[:, 0]
        n = out["audio_lengths"][k]
        assert n == len(want)
        np.testing.assert_array_equal(out["audio"][k, :n], want)
    producer.close()
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="fbank.*needs one sample"):
        create_producer(ProducerSpec("audio", "audio", ds, 4, options={"features": "fbank"}))


@pytest.mark.parametrize("rate", [0, -16000, 16000.5, True, "fast"])
def test_a_sample_rate_that_is_no_positive_whole_number_is_refused_naming_it(ds, rate):
    # 0 and negatives failed every sample, blamed on the dataset ("looks badly damaged. Run
    # `chute verify`"); 16000.5 and True were truncated to 16000 and 1 silently
    with pytest.raises(ValueError, match=r"field 'audio' of .*sample_rate must be a positive "
                                         r"whole number of Hz"):
        create_producer(ProducerSpec("audio", "audio", ds, 4,
                                     options={"unit": "segment", "sample_rate": rate}))


def test_a_flac_written_as_a_stream_converts_and_reads_to_its_last_frame(tmp_path):
    # a FLAC written to a pipe has total samples 0 in its header (libsndfile: length unknown);
    # soundfile's reads fail at its end, so conversion refused it and its last frames could not
    # be read: its length now comes from decoding it, and segments read through libsndfile
    import io
    import json

    from chute.convert import AudioConvertOptions, convert_audio

    rate = 16000
    pcm = (np.random.default_rng(5).standard_normal((3 * rate, 1)) * 3000).astype(np.int16)
    buffer = io.BytesIO()
    sf.write(buffer, pcm, rate, format="FLAC", subtype="PCM_16")
    raw = bytearray(buffer.getvalue())
    raw[8 + 13] &= 0xF0  # STREAMINFO's 36-bit total samples (after "fLaC" and its header)
    raw[8 + 14:8 + 18] = bytes(4)
    (tmp_path / "s.flac").write_bytes(bytes(raw))
    segments = [{"start": 0.5, "end": 1.0}, {"start": 2.0, "end": 3.0}]
    (tmp_path / "s.jsonl").write_text(json.dumps({"key": "s", "path": "s.flac",
                                                  "info": {"segments": segments}}) + "\n")
    report = convert_audio(tmp_path / "s.jsonl", tmp_path / "ds",
                           AudioConvertOptions(workers=1, progress=False))
    assert report.written == 1 and not report.skipped
    ds = open_dataset(tmp_path / "ds")
    assert int(ds.column("num_frames")[0]) == len(pcm)
    producer = create_producer(ProducerSpec("audio", "audio", ds, 2, options={"unit": "segment"}))
    _, out, status = _batch(producer, [0, 1])
    assert not status.any()
    for row, s in enumerate(segments):
        want = pcm[round(s["start"] * rate):round(s["end"] * rate), 0] / np.float32(32768)
        assert out["audio_lengths"][row] == len(want)
        np.testing.assert_array_equal(out["audio"][row, :len(want)], want)
    producer.close()


@pytest.mark.parametrize("frames, speed", [(80, 1.0), (1416, 0.9)])
def test_resampled_lengths_are_soxrs_also_at_a_half_frame(tmp_path, frames, speed):
    # 80 frames at 8 kHz are 220.5 at 22.05 kHz, 1416 at speed 0.9 are 4336.5: soxr makes 221
    # and 4337, while lengths rounded half to even said 220 and 4336, so the sample failed
    import json

    from chute.convert import AudioConvertOptions, convert_audio

    rate = 8000
    pcm = (np.random.default_rng(7).standard_normal((rate, 1)) * 3000).astype(np.int16)
    sf.write(tmp_path / "r.wav", pcm, rate, subtype="PCM_16")
    segment = {"start": 0.25, "end": 0.25 + frames / rate}
    (tmp_path / "r.jsonl").write_text(json.dumps({"key": "r", "path": "r.wav",
                                                  "info": {"segments": [segment]}}) + "\n")
    convert_audio(tmp_path / "r.jsonl", tmp_path / "ds",
                  AudioConvertOptions(workers=1, progress=False))
    producer = create_producer(ProducerSpec("audio", "audio", open_dataset(tmp_path / "ds"), 1,
                                            options={"unit": "segment", "sample_rate": 22050,
                                                     "speeds": (speed,)}))
    _, out, status = _batch(producer, [0])
    want = soxr.resample(pcm[2000:2000 + frames, 0] / np.float32(32768), rate * speed, 22050)
    assert not status.any() and out["audio_lengths"][0] == len(want)
    np.testing.assert_allclose(out["audio"][0, :len(want)], want, atol=1e-6)
    producer.close()


def test_a_producer_built_alone_reads_audio_options_and_honours_merge(ds):
    # issue 39: the family hands AudioOptions itself to the producer, a hand-built dict is
    # converted through it; merge (left out of the dict before) is applied, never ignored
    from chute.pipelines import AudioOptions

    typed = create_producer(ProducerSpec("audio", "audio", ds, 4,
                                         options=AudioOptions(unit="segment")))
    given = create_producer(ProducerSpec("audio", "audio", ds, 4, options={"unit": "segment"}))
    assert typed.threads == given.threads == 1 and typed.unit.n == given.unit.n
    typed.close()
    given.close()
    with pytest.raises(ValueError, match="merge=.*needs unit='segment'"):
        create_producer(ProducerSpec("audio", "audio", ds, 4, options={"merge": (1.0, 2.0)}))
