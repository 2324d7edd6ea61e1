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
