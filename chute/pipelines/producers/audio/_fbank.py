"""Log mel filterbank features (Kaldi's "fbank" recipe) computed with torch ops on a padded
batch of waveforms (docs/design.md, "Audio"; options and presets in docs/audio.md).

Per frame of `win = int(rate * 0.001 * frame_length_ms)` samples every `hop = int(rate * 0.001
* frame_shift_ms)` (snip_edges: only whole frames, `1 + (n - win) // hop`; otherwise `(n + hop
// 2) // hop` frames starting at `m * hop + hop // 2 - win // 2`, the waveform mirrored at its
ends): scale, dither, remove the frame's mean, pre-emphasis, window, zero-pad to a power of two,
power spectrum, `bins` triangular mel filters between `low_freq` and `high_freq` on the
`1127 ln(1 + f / 700)` scale (without the Nyquist bin), log (floored at the float32 epsilon).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from chute.pipelines.producers.audio._options import FbankOptions
from chute.pipelines.sampling._keyed_random import derive_key, random_u64

__all__ = ["FbankConfig", "FbankDither", "fbank_frames", "fbank"]


class FbankConfig:
    """Frame and filter sizes for one sample rate.

    Args:
        rate: sample rate of the waveforms.
        options: the fbank options (default: FbankOptions(), what features="fbank" uses).
    """

    def __init__(self, rate: int, options: FbankOptions | None = None):
        self.options = options if options is not None else FbankOptions()
        self.rate, self.bins = int(rate), int(self.options.num_mel_bins)
        # truncated as Kaldi does: 11025 Hz gives 275-sample frames, not round()'s 276
        self.win = int(rate * 0.001 * self.options.frame_length_ms)
        self.hop = int(rate * 0.001 * self.options.frame_shift_ms)
        if self.win < 1 or self.hop < 1:
            raise ValueError(f"fbank frames of {self.options.frame_length_ms} ms every "
                             f"{self.options.frame_shift_ms} ms are shorter than one sample at "
                             f"{rate} Hz; use longer frames")
        self.fft = 1 << (self.win - 1).bit_length()
        nyquist = self.rate / 2
        self.high = self.options.high_freq if self.options.high_freq > 0 else \
            nyquist + self.options.high_freq
        if not 0 <= self.options.low_freq < self.high <= nyquist:
            raise ValueError(f"fbank filters from low_freq={self.options.low_freq} to "
                             f"high_freq={self.options.high_freq} (= {self.high} Hz) do not fit "
                             f"0..{nyquist} Hz at {rate} Hz; pick 0 <= low < high <= Nyquist")

    def mel_banks(self) -> np.ndarray:
        """float64 [bins, fft // 2] triangular filters."""
        def mel(f):
            return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)

        low, high = mel(self.options.low_freq), mel(self.high)
        delta = (high - low) / (self.bins + 1)
        left = low + delta * np.arange(self.bins)[:, None]
        freqs = mel(np.arange(self.fft // 2) * self.rate / self.fft)[None, :]
        up = (freqs - left) / delta
        down = (left + 2 * delta - freqs) / delta
        return np.maximum(0.0, np.minimum(up, down))

    def window(self):
        """float64 [win] torch window."""
        import torch

        n = torch.arange(self.win, dtype=torch.float64)
        a = 2 * math.pi / (self.win - 1) if self.win > 1 else 0.0
        kind = self.options.window_type
        if kind == "rectangular":
            return torch.ones(self.win, dtype=torch.float64)
        if kind == "hamming":
            return 0.54 - 0.46 * torch.cos(a * n)
        if kind == "blackman":
            return 0.42 - 0.5 * torch.cos(a * n) + 0.08 * torch.cos(2 * a * n)
        hann = 0.5 - 0.5 * torch.cos(a * n)
        return hann ** 0.85 if kind == "povey" else hann


def fbank_frames(lengths: ArrayLike, config: FbankConfig) -> np.ndarray:
    """Frames of each waveform length (int64)."""
    lengths = np.asarray(lengths, np.int64)
    if not config.options.snip_edges:
        return (lengths + config.hop // 2) // config.hop
    return np.where(lengths >= config.win, 1 + (lengths - config.win) // config.hop, 0)


class FbankDither:
    """A ParamSource: "fbank_dither", one noise seed per sample as a pure function of (seed,
    epoch, sample id), so dithered features are the same on every rank, thread and resume."""

    def __eq__(self, other) -> bool:
        return isinstance(other, FbankDither)

    def __hash__(self) -> int:
        return hash(FbankDither)

    def __call__(self, seed: int, epoch: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"fbank_dither": random_u64(derive_key(seed, epoch, "fbank-dither"),
                                           np.asarray(ids), stream=0)}


def _frames(audio, lengths: np.ndarray, count: int, config: FbankConfig):
    """float64 [B, count, win] frames of each row (snip_edges=False: mirrored at the row's own
    length, so the zero padding of the batch never enters a frame)."""
    import torch

    x = audio.double()
    if config.options.snip_edges:
        return x.unfold(1, config.win, config.hop)[:, :count]
    # lhotse's first frame starts one sample later than Kaldi's when the hop is odd
    first = (-((config.win - config.hop) // 2) if config.options.frame_offset == "lhotse"
             else config.hop // 2 - config.win // 2)
    start = np.arange(count)[:, None] * config.hop + first
    index = start + np.arange(config.win)[None, :]  # [count, win], may leave [0, n)
    n = np.maximum(lengths, 1)[:, None, None]
    period = index[None] % (2 * n)
    index = np.where(period >= n, 2 * n - 1 - period, period)  # s<0 -> -s-1, s>=n -> 2n-1-s
    rows = torch.arange(x.shape[0])[:, None, None]
    return x[rows, torch.from_numpy(index)]


def fbank(audio, lengths: np.ndarray, config: FbankConfig, dither_seeds=None):
    """float32 [B, F, bins] features of a zero-padded batch `audio` [B, T] (a torch tensor);
    rows past each sample's frame count are zero.

    Args:
        audio: float32 [B, T] waveforms, zero-padded.
        lengths: valid samples of each row.
        config: frame and filter sizes.
        dither_seeds: one uint64 noise seed per row (needed when the options dither).
    """
    import torch

    options = config.options
    lengths = np.asarray(lengths, np.int64)
    frames = fbank_frames(lengths, config)
    count = int(frames.max(initial=0))
    b = audio.shape[0]
    if count == 0:
        return torch.zeros(b, 0, config.bins)
    x = _frames(audio, lengths, count, config) * options.scale  # [B, F, win]
    if options.dither > 0:
        if dither_seeds is None:
            raise ValueError("fbank with dither needs one noise seed per row (dither_seeds=)")
        noise = np.zeros((b, count, config.win))
        for row, seed in enumerate(np.asarray(dither_seeds, np.uint64)):
            noise[row, :frames[row]] = np.random.default_rng(int(seed)).standard_normal(
                (int(frames[row]), config.win))
        x = x + options.dither * torch.from_numpy(noise)
    if options.remove_dc_offset:
        x = x - x.mean(dim=2, keepdim=True)
    p = options.preemph_coeff
    if p != 0:
        x = torch.cat([x[..., :1] * (1 - p), x[..., 1:] - p * x[..., :-1]], dim=2)
    x = x * config.window()
    power = torch.fft.rfft(x, n=config.fft).abs() ** 2
    banks = torch.from_numpy(config.mel_banks())
    energies = power[..., :config.fft // 2] @ banks.T
    out = torch.log(energies.clamp_min(float(np.finfo(np.float32).eps))).float()
    valid = torch.arange(count)[None, :] < torch.from_numpy(frames)[:, None]
    return out * valid[..., None]
