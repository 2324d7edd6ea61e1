"""Log mel filterbank features (Kaldi's "fbank" recipe) computed with torch ops on a padded
batch of waveforms (docs/design.md, "Audio").

Per frame of `win = round(0.025 * rate)` samples every `hop = round(0.010 * rate)` (only whole
frames: `1 + (n - win) // hop`): remove the frame's mean, pre-emphasis 0.97, Povey window,
zero-pad to a power of two, power spectrum, `bins` triangular mel filters between 20 Hz and
Nyquist on the `1127 ln(1 + f / 700)` scale (without the Nyquist bin), log (floored at the
float32 epsilon). The waveform is used as given (no int16 scaling, no dither).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["FbankConfig", "fbank_frames", "fbank"]


class FbankConfig:
    """Frame and filter sizes for one sample rate.

    Args:
        rate: sample rate of the waveforms.
        bins: mel bins.
    """

    def __init__(self, rate: int, bins: int = 80):
        self.rate, self.bins = int(rate), int(bins)
        self.win = round(0.025 * rate)
        self.hop = round(0.010 * rate)
        self.fft = 1 << (self.win - 1).bit_length()

    def mel_banks(self) -> np.ndarray:
        """float64 [bins, fft // 2] triangular filters."""
        def mel(f):
            return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)

        low, high = mel(20.0), mel(self.rate / 2)
        delta = (high - low) / (self.bins + 1)
        left = low + delta * np.arange(self.bins)[:, None]
        freqs = mel(np.arange(self.fft // 2) * self.rate / self.fft)[None, :]
        up = (freqs - left) / delta
        down = (left + 2 * delta - freqs) / delta
        return np.maximum(0.0, np.minimum(up, down))


def fbank_frames(lengths: ArrayLike, config: FbankConfig) -> np.ndarray:
    """Whole frames of each waveform length (int64)."""
    lengths = np.asarray(lengths, np.int64)
    return np.where(lengths >= config.win, 1 + (lengths - config.win) // config.hop, 0)


def fbank(audio, lengths: np.ndarray, config: FbankConfig):
    """float32 [B, F, bins] features of a zero-padded batch `audio` [B, T] (a torch tensor);
    rows past each sample's frame count are zero.

    Args:
        audio: float32 [B, T] waveforms, zero-padded.
        lengths: valid samples of each row.
        config: frame and filter sizes.
    """
    import torch

    frames = fbank_frames(lengths, config)
    count = int(frames.max(initial=0))
    b = audio.shape[0]
    if count == 0:
        return torch.zeros(b, 0, config.bins)
    x = audio.double().unfold(1, config.win, config.hop)[:, :count]  # [B, F, win]
    x = x - x.mean(dim=2, keepdim=True)
    x = torch.cat([x[..., :1] * (1 - 0.97), x[..., 1:] - 0.97 * x[..., :-1]], dim=2)
    n = torch.arange(config.win, dtype=torch.float64)
    x = x * (0.5 - 0.5 * torch.cos(2 * math.pi * n / (config.win - 1))) ** 0.85
    power = torch.fft.rfft(x, n=config.fft).abs() ** 2
    banks = torch.from_numpy(config.mel_banks())
    energies = power[..., :config.fft // 2] @ banks.T
    out = torch.log(energies.clamp_min(float(np.finfo(np.float32).eps))).float()
    valid = torch.arange(count)[None, :] < torch.from_numpy(frames)[:, None]
    return out * valid[..., None]
