"""AudioOptions: how an audio field's samples are cut, resampled and perturbed
(docs/audio.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from chute.pipelines._common._options import suggest_options

__all__ = ["AudioOptions", "FbankOptions"]

# Each preset is the defaults of that library's own options object (the version named), read
# from its documentation and checked against the installed library by tests/pipelines/
# test_fbank.py; the feature values are compared numerically there too (docs/audio.md).
_PRESETS: dict[str, dict[str, Any]] = {
    # kaldi_native_fbank.FbankOptions() (1.23): 23 bins, snip_edges, dither 3e-5, up to Nyquist
    "kaldi-native-fbank": {"num_mel_bins": 23, "snip_edges": True, "dither": 3e-5,
                           "high_freq": 0.0},
    # lhotse.Fbank(lhotse.FbankConfig()) (1.33): 80 bins, centred frames, no dither, 400 Hz
    # below Nyquist
    "lhotse": {"num_mel_bins": 80, "snip_edges": False, "dither": 0.0, "high_freq": -400.0,
               "frame_offset": "lhotse"},
}
_WINDOWS = ("povey", "hanning", "hamming", "rectangular", "blackman")


@suggest_options
@dataclass(frozen=True)
class FbankOptions:
    """Kaldi-style log mel filterbank options of an audio field:
    `AudioOptions(features=FbankOptions.preset("lhotse"))` (docs/audio.md, "Fbank features").
    The defaults are what `features="fbank"` computes.

    Args:
        num_mel_bins: triangular mel filters (output width).
        frame_length_ms: frame length; samples per frame are `int(rate * 0.001 * ms)`.
        frame_shift_ms: frame shift, in the same way.
        snip_edges: True: only whole frames, `1 + (n - length) // shift`; False: `(n + shift //
            2) // shift` frames centred on the shifts, the waveform mirrored at its ends.
        dither: standard deviation of Gaussian noise added to every frame (on the scaled
            waveform), drawn from (seed, epoch, sample id); 0 adds none.
        scale: factor applied to the waveform first (32768 gives the int16 scale Kaldi's own
            tools read; float waveforms in [-1, 1] otherwise).
        low_freq: lowest mel filter edge in Hz.
        high_freq: highest mel filter edge in Hz; 0 or negative: that much below Nyquist.
        preemph_coeff: pre-emphasis coefficient.
        remove_dc_offset: subtract each frame's mean.
        window_type: "povey", "hanning", "hamming", "rectangular" or "blackman".
        frame_offset: with snip_edges=False, where frame m starts: "kaldi" at `m * shift +
            shift // 2 - length // 2` (Kaldi, kaldi-native-fbank) or "lhotse" at `m * shift -
            (length - shift) // 2` (lhotse); they differ by one sample when the shift is odd
            (441 samples at 44.1 kHz).
    """

    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    snip_edges: bool = True
    dither: float = 0.0
    scale: float = 1.0
    low_freq: float = 20.0
    high_freq: float = 0.0
    preemph_coeff: float = 0.97
    remove_dc_offset: bool = True
    window_type: Literal["povey", "hanning", "hamming", "rectangular", "blackman"] = "povey"
    frame_offset: Literal["kaldi", "lhotse"] = "kaldi"

    def __post_init__(self) -> None:
        if self.frame_offset not in ("kaldi", "lhotse"):
            raise ValueError(f"FbankOptions(frame_offset={self.frame_offset!r}): use 'kaldi' "
                             "or 'lhotse'")
        if self.window_type not in _WINDOWS:
            raise ValueError(f"FbankOptions(window_type={self.window_type!r}): use one of "
                             f"{list(_WINDOWS)}")
        if int(self.num_mel_bins) < 1 or self.frame_length_ms <= 0 or self.frame_shift_ms <= 0:
            raise ValueError(f"FbankOptions: num_mel_bins ({self.num_mel_bins}), "
                             f"frame_length_ms ({self.frame_length_ms}) and frame_shift_ms "
                             f"({self.frame_shift_ms}) must be positive")
        if self.dither < 0:
            raise ValueError(f"FbankOptions(dither={self.dither}): dither is a standard "
                             "deviation; pass 0 or more")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> FbankOptions:
        """The defaults of another library's fbank, with `overrides` on top:
        `FbankOptions.preset("kaldi-native-fbank", num_mel_bins=80)`.

        Args:
            name: "kaldi-native-fbank" (kaldi_native_fbank.FbankOptions()) or "lhotse"
                (lhotse.Fbank(lhotse.FbankConfig())).
            overrides: FbankOptions fields to change.
        """
        if name not in _PRESETS:
            raise ValueError(f"FbankOptions.preset({name!r}): no such preset; use one of "
                             f"{sorted(_PRESETS)}")
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"FbankOptions.preset({name!r}): unknown option(s) {unknown}")
        return replace(cls(**_PRESETS[name]), **overrides)


@suggest_options
@dataclass(frozen=True)
class AudioOptions:
    """Options of one audio field: `fields={"audio": AudioOptions(unit="segment")}`.

    Args:
        sample_rate: resample every sample to this rate (default: each recording's own rate;
            a dataset of mixed rates then warns).
        mono: mix channels down to one.
        unit: what one sample of the Pipeline is: "recording" (a whole file) or "segment" (one
            timestamped segment listed in the `meta_field` field's "segments"; the other
            fields are read from its recording). Default: one dataset row.
        merge: (min_s, max_s) with unit="segment": adjacent segments of a recording merged into
            samples of about that many seconds, drawn anew each epoch from (seed, epoch).
        meta_field: the JSON field that lists each recording's segments.
        speeds: speed perturbation factors, one drawn per sample in train (e.g. (0.9, 1.0,
            1.1)).
        volume_db: (low, high) gain in dB drawn per sample in train.
        features: log mel filterbank features as well as the waveforms: "fbank" (the
            FbankOptions() defaults) or a FbankOptions (docs/audio.md).
        threads: decoding threads.
    """

    sample_rate: int | None = None
    mono: bool = True
    unit: Literal["recording", "segment"] | None = None
    merge: tuple[float, float] | None = None
    meta_field: str = "meta"
    speeds: tuple[float, ...] = (1.0,)
    volume_db: tuple[float, float] = (0.0, 0.0)
    features: Literal["fbank"] | FbankOptions | None = None
    threads: int | None = None
