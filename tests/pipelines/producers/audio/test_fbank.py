"""Log mel filterbank features: chute/pipelines/producers/audio/_fbank.py against a plain NumPy
reference of Kaldi's fbank recipe written frame by frame (the same definition, independent code)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from chute.pipelines.producers.audio._fbank import FbankConfig, fbank, fbank_frames


def _reference(wave: np.ndarray, rate: int, bins: int = 80) -> np.ndarray:
    win, hop = round(0.025 * rate), round(0.010 * rate)
    fft = 1
    while fft < win:
        fft *= 2

    def mel(f):
        return 1127.0 * math.log(1.0 + f / 700.0)

    low, high = mel(20.0), mel(rate / 2)
    delta = (high - low) / (bins + 1)
    banks = np.zeros((bins, fft // 2))
    for m in range(bins):
        left, center, right = low + m * delta, low + (m + 1) * delta, low + (m + 2) * delta
        for i in range(fft // 2):
            f = mel(i * rate / fft)
            if left < f < right:
                banks[m, i] = (f - left) / (center - left) if f <= center else \
                    (right - f) / (right - center)
    window = np.array([(0.5 - 0.5 * math.cos(2 * math.pi * n / (win - 1))) ** 0.85
                       for n in range(win)])
    rows = []
    for start in range(0, len(wave) - win + 1, hop):
        frame = wave[start:start + win].astype(np.float64)
        frame = frame - frame.mean()
        emphasised = frame.copy()
        for i in range(win - 1, 0, -1):
            emphasised[i] = frame[i] - 0.97 * frame[i - 1]
        emphasised[0] = frame[0] - 0.97 * frame[0]
        spectrum = np.abs(np.fft.rfft(emphasised * window, n=fft)) ** 2
        energies = banks @ spectrum[:fft // 2]
        rows.append(np.log(np.maximum(energies, np.finfo(np.float32).eps)))
    return np.array(rows, np.float32).reshape(-1, bins)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_fbank_equals_the_reference_within_1e3(rate):
    rng = np.random.default_rng(rate)
    lengths = np.array([rate // 2, rate // 5, 150, rate // 3])  # 150: shorter than a frame
    audio = np.zeros((4, lengths.max()), np.float32)
    for k, n in enumerate(lengths):
        t = np.arange(n) / rate
        audio[k, :n] = 0.3 * np.sin(2 * np.pi * (200 + 300 * k) * t) + \
            0.05 * rng.standard_normal(n)
    config = FbankConfig(rate)
    got = fbank(torch.from_numpy(audio), lengths, config).numpy()
    frames = fbank_frames(lengths, config)
    assert got.shape == (4, frames.max(), 80) and frames[2] == 0
    for k in range(4):
        want = _reference(audio[k, :lengths[k]], rate)
        assert len(want) == frames[k]
        np.testing.assert_allclose(got[k, :frames[k]], want, atol=1e-3, rtol=0)
        assert not got[k, frames[k]:].any()


def test_producer_delivers_fbank_of_its_own_waveforms(tmp_path):
    pytest.importorskip("soundfile")
    from chute.pipelines import AudioOptions, Pipeline
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path, names=("a.wav", "b.flac"))
    pipe = Pipeline(folder, 3, augment="eval",
                    fields={"audio": AudioOptions(unit="segment", features="fbank")})
    for batch in pipe:
        config = FbankConfig(16000)
        want = fbank(batch["audio"], batch["audio_lengths"].numpy(), config)
        assert torch.equal(batch["audio_fbank"], want)
        assert batch["audio_fbank_lengths"].tolist() == \
            fbank_frames(batch["audio_lengths"].numpy(), config).tolist()
    with pytest.raises(ValueError, match="fbank"):
        Pipeline(folder, 3, fields={"audio": AudioOptions(features="mfcc")})


def _tone(rate: int, n: int, seed: int) -> np.ndarray:
    t = np.arange(n) / rate
    noise = np.random.default_rng(seed).standard_normal(n)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise).astype(np.float32)


def _ours(waves: list[np.ndarray], rate: int, options) -> list[np.ndarray]:
    """Features of `waves` computed as one zero-padded batch, cut to each row's frames."""
    lengths = np.array([len(w) for w in waves])
    audio = np.zeros((len(waves), lengths.max()), np.float32)
    for k, w in enumerate(waves):
        audio[k, :len(w)] = w
    config = FbankConfig(rate, options)
    got = fbank(torch.from_numpy(audio), lengths, config).numpy()
    return [got[k, :n] for k, n in enumerate(fbank_frames(lengths, config))]


# Tolerance of the library comparisons: 1e-3 on log energies (0.1 % of an energy). Both libraries
# compute in float32 (their FFT and mel weights), chute in float64 then rounds; on these
# noisy tones the largest difference seen is 2.4e-4 (lhotse, 22050 Hz) and 1.7e-5 (knf).
LIBRARY_ATOL = 1e-3


def test_kaldi_native_fbank_preset_is_its_default_options():
    knf = pytest.importorskip("kaldi_native_fbank")
    from chute.pipelines import FbankOptions

    want = knf.FbankOptions()
    got = FbankOptions.preset("kaldi-native-fbank")
    frame, mel = want.frame_opts, want.mel_opts
    assert (got.num_mel_bins, got.snip_edges, got.low_freq, got.high_freq, got.window_type,
            got.remove_dc_offset, got.frame_length_ms, got.frame_shift_ms) == \
        (mel.num_bins, frame.snip_edges, mel.low_freq, mel.high_freq, frame.window_type,
         frame.remove_dc_offset, frame.frame_length_ms, frame.frame_shift_ms)
    assert got.dither == pytest.approx(frame.dither, rel=1e-6)  # knf stores a float32
    assert got.preemph_coeff == pytest.approx(frame.preemph_coeff, rel=1e-6)
    assert frame.round_to_power_of_two and want.use_power and want.use_log_fbank
    assert not want.use_energy and not mel.htk_mode and not mel.is_librosa


@pytest.mark.parametrize("rate", [16000, 8000, 22050])
def test_kaldi_native_fbank_preset_equals_kaldi_native_fbank(rate):
    knf = pytest.importorskip("kaldi_native_fbank")
    from chute.pipelines import FbankOptions

    waves = [_tone(rate, n, k) for k, n in enumerate((rate // 2, 1234, 150, 700))]
    options = FbankOptions.preset("kaldi-native-fbank", dither=0.0)  # noise cannot be compared
    for wave, got in zip(waves, _ours(waves, rate, options), strict=True):
        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.frame_opts.samp_freq = rate
        online = knf.OnlineFbank(opts)
        online.accept_waveform(rate, wave.tolist())
        online.input_finished()
        want = np.array([online.get_frame(i) for i in range(online.num_frames_ready)])
        assert got.shape == want.reshape(-1, 23).shape
        np.testing.assert_allclose(got, want.reshape(-1, 23), atol=LIBRARY_ATOL, rtol=0)


def test_lhotse_preset_is_its_default_config():
    lhotse = pytest.importorskip("lhotse")
    from chute.pipelines import FbankOptions

    want = lhotse.FbankConfig()
    got = FbankOptions.preset("lhotse")
    assert (got.num_mel_bins, got.snip_edges, got.dither, got.low_freq, got.high_freq,
            got.window_type, got.remove_dc_offset, got.preemph_coeff) == \
        (want.num_filters, want.snip_edges, want.dither, want.low_freq, want.high_freq,
         want.window_type, want.remove_dc_offset, want.preemph_coeff)
    assert (got.frame_length_ms, got.frame_shift_ms) == \
        (want.frame_length * 1000, want.frame_shift * 1000)
    assert want.round_to_power_of_two and not want.use_fft_mag and not want.use_energy
    assert want.num_mel_bins is None and not want.norm_filters
    assert want.torchaudio_compatible_mel_scale


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # lhotse's, NumPy 2
@pytest.mark.parametrize("rate", [16000, 8000, 22050, 44100, 48000])
def test_lhotse_preset_equals_lhotse_fbank(rate):
    """Tones and near-silence at rates of even and odd frame shifts (44.1 kHz: 441 samples,
    where lhotse's centred frames start one sample after Kaldi's; before `frame_offset` the
    preset differed there by up to 4e-2 on a tone and 6.6e-3 on near-silence: issue 38
    item 15)."""
    lhotse = pytest.importorskip("lhotse")
    from chute.pipelines import FbankOptions

    # lengths of at least one frame: lhotse's own mirroring fails on shorter waveforms
    waves = [_tone(rate, n, k) for k, n in enumerate((rate // 2, 1234, 600, 1000))]
    noise = np.random.default_rng(rate).standard_normal(rate // 2) * 1e-5  # near silence
    waves.append(noise.astype(np.float32))
    extractor = lhotse.Fbank(lhotse.FbankConfig(sampling_rate=rate))
    for wave, got in zip(waves, _ours(waves, rate, FbankOptions.preset("lhotse")), strict=True):
        want = extractor.extract(wave, rate)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=LIBRARY_ATOL, rtol=0)


def test_centred_frames_mirror_each_row_at_its_own_length():
    from chute.pipelines import FbankOptions

    # a short row padded next to a long one: its last frames mirror its samples, not the zeros
    options = FbankOptions(snip_edges=False)
    waves = [_tone(16000, 16000, 1), _tone(16000, 950, 2)]
    batched = _ours(waves, 16000, options)
    for wave, got in zip(waves, batched, strict=True):
        alone = _ours([wave], 16000, options)[0]
        assert got.shape == alone.shape == ((len(wave) + 80) // 160, 80)
        np.testing.assert_array_equal(got, alone)
    assert _ours([waves[1][:79]], 16000, options)[0].shape == (0, 80)


def test_scale_window_and_filter_edges_change_the_features():
    from chute.pipelines import FbankOptions

    wave = [_tone(16000, 4000, 3)]
    base = _ours(wave, 16000, FbankOptions())[0]
    # an energy scales by scale**2: its log moves by 2 ln(scale) wherever it is above the floor
    scaled = _ours(wave, 16000, FbankOptions(scale=32768.0))[0]
    np.testing.assert_allclose(scaled - base, 2 * np.log(32768.0), atol=1e-3)
    for change in ({"window_type": "hamming"}, {"high_freq": -400.0}, {"low_freq": 100.0},
                   {"preemph_coeff": 0.0}, {"remove_dc_offset": False}):
        assert not np.allclose(_ours(wave, 16000, FbankOptions(**change))[0], base), change
    assert _ours(wave, 16000, FbankOptions(num_mel_bins=40))[0].shape == (base.shape[0], 40)


def test_fbank_options_refuse_what_cannot_be_computed():
    from chute.pipelines import FbankOptions

    with pytest.raises(ValueError, match="window_type"):
        FbankOptions(window_type="hann")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no such preset"):
        FbankOptions.preset("kaldi")
    with pytest.raises(ValueError, match="unknown option"):
        FbankOptions.preset("lhotse", bins=40)
    with pytest.raises(ValueError, match="high_freq"):
        FbankConfig(8000, FbankOptions(high_freq=6000.0))
    with pytest.raises(ValueError, match="dither"):
        FbankOptions(dither=-1.0)


def test_dither_is_a_pure_function_of_seed_epoch_and_sample(tmp_path):
    pytest.importorskip("soundfile")
    from chute.pipelines import AudioOptions, FbankOptions, Pipeline
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path, names=("a.wav", "b.flac"))
    options = FbankOptions(dither=0.01)

    def features(seed: int, epoch: int, batch_size: int) -> dict[str, np.ndarray]:
        pipe = Pipeline(folder, batch_size, augment="eval", seed=seed,
                        fields={"audio": AudioOptions(unit="segment", features=options)})
        pipe.set_epoch(epoch)
        found = {}
        for batch in pipe:
            for row, seg in enumerate(batch["audio_segment"]):
                n = int(batch["audio_fbank_lengths"][row])
                found[(seg["recording_key"], seg["index"])] = batch["audio_fbank"][row, :n].numpy()
        return found

    first = features(0, 0, 3)
    again = features(0, 0, 2)  # other batches, same samples: the same noise
    assert first.keys() == again.keys() and len(first) > 2
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    other = features(0, 1, 3)
    assert all(not np.array_equal(first[k], other[k]) for k in first)
    # the noise is as large as asked: the features differ from undithered ones, a little
    pipe = Pipeline(folder, 3, augment="eval",
                    fields={"audio": AudioOptions(unit="segment", features=FbankOptions())})
    plain = {}
    for batch in pipe:
        for row, seg in enumerate(batch["audio_segment"]):
            n = int(batch["audio_fbank_lengths"][row])
            plain[(seg["recording_key"], seg["index"])] = batch["audio_fbank"][row, :n].numpy()
    for key in first:
        difference = np.abs(first[key] - plain[key])
        assert 0 < difference.max() and np.median(difference) < 0.5


def test_producer_takes_a_preset(tmp_path):
    pytest.importorskip("soundfile")
    from chute.pipelines import AudioOptions, FbankOptions, Pipeline
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path, names=("a.wav",))
    options = FbankOptions.preset("lhotse")
    pipe = Pipeline(folder, 2, augment="eval",
                    fields={"audio": AudioOptions(unit="segment", features=options)})
    config = FbankConfig(16000, options)
    for batch in pipe:
        lengths = batch["audio_lengths"].numpy()
        assert torch.equal(batch["audio_fbank"], fbank(batch["audio"], lengths, config))
        assert batch["audio_fbank_lengths"].tolist() == \
            ((lengths + 80) // 160).tolist()
