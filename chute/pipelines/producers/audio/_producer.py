"""Producer `audio`: decodes only each sample's [start_frame, stop_frame) of a recording stored
as it is (FLAC, WAV, OGG, MP3) -- libsndfile through soundfile seeks in the memory-mapped bytes
and reads that many frames -- then mixes down to mono (or keeps the channels), resamples with
soxr when `sample_rate` differs from the file's or a speed perturbation asks for it, and applies
the volume perturbation (docs/design.md, "Audio").

Outputs: `<field>` float32 [B, T] (mono) or [B, C, T], zero-padded to the batch's longest
sample; `<field>_lengths` int64 [B]; `<field>_segment`, per sample the segment's own record as
listed (start and end in seconds as stored, every other field) with its "key", "txt" and "index"
(`segment_record`; merged segments: texts joined by spaces, the span, their records), or the
recording's {"key", "txt", "start", "end", "index": -1} for a whole recording. A sample
whose bytes do not decode, whose file rate differs from the `sample_rate` column, or that yields
fewer frames than its segment asks for is marked failed (the Pipeline substitutes it); it is
never returned short or wrong.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

from chute._fork import ProcessPool
from chute._lazy import require
from chute._sndfile_read import read_frames
from chute.fallbacks import decode_segment, segment_decoder_status
from chute.pipelines._common._stages import StageTimes
from chute.pipelines.producers._contract import (
    Output,
    ProducerSpec,
    StoredFieldProducer,
    no_candidates,
    typed_options,
)
from chute.pipelines.producers.audio._fbank import (
    FbankConfig,
    FbankDither,
    fbank,
    fbank_frames,
)
from chute.pipelines.producers.audio._merge import check_merge
from chute.pipelines.producers.audio._options import AudioOptions, FbankOptions
from chute.pipelines.producers.audio._perturb import AudioPerturbation
from chute.pipelines.producers.audio._units import sample_unit

__all__ = ["AudioProducer", "create", "candidates", "segment_record"]

class _ViewFile(io.RawIOBase):
    """A read-only file over a zero-copy view of the stored bytes: libsndfile reads only what
    it seeks to, so a segment of an hour-long recording copies only its own frames."""

    def __init__(self, view: np.ndarray):
        # numpy's stubs give ndarray __buffer__ on Python >= 3.12 only
        self.view = memoryview(view).cast("B")  # type: ignore[arg-type]
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = (0, self.position, len(self.view))[whence]
        self.position = min(max(base + offset, 0), len(self.view))
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer) -> int:
        chunk = self.view[self.position:self.position + len(buffer)]
        memoryview(buffer).cast("B")[:len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)


def _out_frames(frames: np.ndarray, rates: np.ndarray, out_rates: np.ndarray) -> np.ndarray:
    """Frames after resampling `frames` from `rates` to `out_rates`: soxr's length, `frames /
    (rates / out_rates)` rounded half up, computed as soxr does (a half rounded to even, or
    the product `frames * (out / in)`, is one frame off for some lengths, and the sample then
    failed as short)."""
    frames = np.asarray(frames, np.int64)
    rates = np.asarray(rates, np.float64)
    return np.where(rates == out_rates, frames,
                    np.floor(frames / (rates / out_rates) + 0.5).astype(np.int64))


class AudioProducer(StoredFieldProducer):
    name = "audio"

    def __init__(self, spec: ProducerSpec):
        self.stages = StageTimes()  # the Pipeline gives its own (pipelines/_common/_stages.py)
        options = typed_options(spec, AudioOptions)  # its defaults are the only ones
        self.sf = require("soundfile", "audio")
        self.field = spec.field
        self.dataset = spec.dataset
        self.mono = bool(options.mono)
        # the Pipeline's unit, else (a producer used on its own) one built from the options
        self.unit = spec.unit if spec.unit is not None else sample_unit(
            spec.dataset, options.unit or "recording", options.meta_field,
            merge=check_merge(options.merge, options.unit))
        self.rates = np.asarray(spec.dataset.column("sample_rate"), np.int64)
        self.target = _rate(options.sample_rate, self.field, spec.dataset.path)
        self.mixed_rates = self.target is None and len(np.unique(self.rates)) > 1
        if self.mixed_rates:
            # without resampling each segment is its source's frames, at the source's rate
            warnings.warn(f"field {self.field!r} of {spec.dataset.path} mixes sample rates "
                          f"{sorted(set(self.rates.tolist()))}: each sample is delivered at its "
                          "recording's own rate (the `sample_rate` field tells them apart); "
                          "pass fields={" f"{self.field!r}" ": AudioOptions(sample_rate=R)} to "
                          "resample them to one", stacklevel=2)
        low, high = options.volume_db
        self.perturb = AudioPerturbation(tuple(options.speeds), (low, high))
        if self.target is not None or self.perturb.speeds != (1.0,):
            self.soxr = require("soxr", "audio")
        self.file_channels = np.asarray(spec.dataset.column("channels"), np.int64)
        channels = np.unique(self.file_channels)
        if not self.mono and len(channels) > 1:
            raise ValueError(f"field {self.field!r} of {spec.dataset.path} mixes channel counts "
                             f"{channels.tolist()}; use mono=True to mix them down")
        self.channels = int(channels[0]) if len(channels) else 1
        self.fbank = self._fbank_config(options.features)
        self.reader = spec.dataset.reader(spec.field)
        self.meta_field = options.meta_field
        self.threads = 1 if options.threads is None else int(options.threads)
        self.pool = ProcessPool(self.threads, "chute-audio") if self.threads > 1 else None
        # one foreign call per segment when the shim builds (threads then decode in parallel)
        self.native = segment_decoder_status()
        longest = self.unit.longest()  # in any epoch, also when segments are merged
        slowest = {"speed": np.full(len(longest["recording"]), min(self.perturb.speeds))}
        self.longest = int(self._lengths(longest | slowest).max(initial=0))

    def _fbank_config(self, features) -> FbankConfig | None:
        if features is None:
            return None
        if (features != "fbank" and not isinstance(features, FbankOptions)) or not self.mono:
            raise ValueError(f"features must be None, 'fbank' or a FbankOptions (with "
                             f"mono=True), got {features!r} for field {self.field!r}")
        if self.mixed_rates:
            raise ValueError(f"features='fbank' for field {self.field!r} needs one sample rate, "
                             f"but its recordings mix {sorted(set(self.rates.tolist()))}; pass "
                             "sample_rate= to resample them to one")
        rate = self.target if self.target is not None else int(self.rates[0])
        return FbankConfig(rate, features if isinstance(features, FbankOptions) else None)

    def _rates(self, params: dict) -> tuple[np.ndarray, np.ndarray]:
        """(rate the decoded frames are taken at, output rate) per sample: speed perturbation
        resamples as if the file had been recorded at `rate * speed`."""
        rates = self.rates[params["recording"]].astype(np.float64)
        out = rates if self.target is None else np.full(len(rates), float(self.target))
        return rates * params.get("speed", 1.0), out

    def _lengths(self, params: dict) -> np.ndarray:
        return _out_frames(params["stop_frame"] - params["start_frame"], *self._rates(params))

    def seconds(self, params: dict) -> np.ndarray:
        """Seconds of audio each sample delivers (after speed perturbation and resampling,
        rounded as delivered): what `max_duration` batching packs."""
        rates, out = self._rates(params)
        return _out_frames(params["stop_frame"] - params["start_frame"], rates, out) / out

    def _sample_shape(self, frames: int) -> tuple[int, ...]:
        return (frames,) if self.mono else (self.channels, frames)

    def param_sources(self) -> tuple:
        dither = self.fbank is not None and self.fbank.options.dither > 0
        return (self.unit, self.perturb, *((FbankDither(),) if dither else ()))

    def outputs(self) -> dict[str, Output]:
        outputs = {self.field: Output(self._sample_shape(self.longest), np.dtype(np.float32)),
                   f"{self.field}_lengths": Output((), np.dtype(np.int64)),
                   f"{self.field}_segment": Output((), None)}
        if self.fbank is not None:
            frames = int(fbank_frames([self.longest], self.fbank)[0])
            outputs[f"{self.field}_fbank"] = Output((frames, self.fbank.bins),
                                                    np.dtype(np.float32))
            outputs[f"{self.field}_fbank_lengths"] = Output((), np.dtype(np.int64))
        return outputs

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        b = len(request.ids)
        longest = int(self._lengths(request.params).max(initial=0))
        shapes = {self.field: (b, *self._sample_shape(longest)), f"{self.field}_lengths": (b,),
                  f"{self.field}_segment": (b,)}
        if self.fbank is not None:
            frames = int(fbank_frames([longest], self.fbank)[0])
            shapes[f"{self.field}_fbank"] = (b, frames, self.fbank.bins)
            shapes[f"{self.field}_fbank_lengths"] = (b,)
        return shapes

    def fill(self, request, out: dict) -> np.ndarray:
        params = request.params
        recordings = np.asarray(params["recording"], np.int64)
        lengths = self._lengths(params)
        views = self.reader.read(recordings)
        audio = out[self.field]
        audio[...] = 0
        out[f"{self.field}_lengths"][...] = lengths
        out[f"{self.field}_segment"][:] = self._segments(params, recordings)
        rates, out_rates = self._rates(params)
        gains = params.get("gain", np.ones(len(recordings), np.float32))
        jobs = [(row, views[row], int(recordings[row]), int(params["start_frame"][row]),
                 int(params["stop_frame"][row]), int(lengths[row]), audio,
                 (float(rates[row]), float(out_rates[row]), np.float32(gains[row])))
                for row in range(len(recordings))]
        with self.stages.measure(f"{self.field}/decode+resample"):  # the rows, in parallel
            results = (self.pool.map(self._decode_row, jobs) if self.pool
                       else map(self._decode_row, jobs))
            status = np.fromiter(results, np.uint8, count=len(jobs))
        if self.fbank is not None:
            import torch

            with self.stages.measure(f"{self.field}/fbank"):
                out[f"{self.field}_fbank"][...] = fbank(torch.from_numpy(audio), lengths,
                                                        self.fbank,
                                                        params.get("fbank_dither")).numpy()
                out[f"{self.field}_fbank_lengths"][...] = fbank_frames(lengths, self.fbank)
        return status

    def _segments(self, params: dict, recordings: np.ndarray) -> list[dict]:
        metas = self.dataset.read(self.meta_field, recordings)
        found = []
        for row, meta in enumerate(metas):
            meta = meta or {}
            first, last = int(params["segment"][row]), int(params["last_segment"][row])
            if first < 0:  # a whole recording
                rate = int(self.rates[recordings[row]])
                found.append({"key": meta.get("key"), "txt": meta.get("txt", ""),
                              "start": 0.0, "end": int(params["stop_frame"][row]) / rate,
                              "index": -1})
            else:
                found.append(segment_record(meta, first, last))
        return found
    def _decode_row(self, job) -> int:
        row, view, recording, start, stop, length, audio, (rate, out_rate, gain) = job
        try:
            data = self._decode(view, recording, start, stop)
            if data is not None and rate != out_rate:
                data = np.asarray(self.soxr.resample(data, rate, out_rate), np.float32)
        except (self.sf.LibsndfileError, RuntimeError, ValueError, TypeError):
            return 1
        if data is None or data.shape[0] != length:
            return 1
        if gain != 1:
            data = data * gain
        if self.mono:
            audio[row, :length] = data
        else:
            audio[row, :, :length] = data.T
        return 0

    def _decode(self, view: np.ndarray, recording: int, start: int,
                stop: int) -> np.ndarray | None:
        rate, channels = int(self.rates[recording]), int(self.file_channels[recording])
        if self.native.available:
            data = decode_segment(view, start, stop - start, rate, channels)
            if isinstance(data, int):
                return None  # SEGMENT_ERRORS[data]: never a wrong or short slice
        else:
            with self.sf.SoundFile(_ViewFile(view)) as f:
                if f.samplerate != rate or f.channels != channels or stop > f.frames:
                    return None  # the bytes are not the recording the columns describe
                f.seek(start)
                data = np.empty((stop - start, channels), np.float32)
                if read_frames(self.sf, f, data) != stop - start:
                    return None  # a corrupt or truncated frame ended the read early
        if self.mono:
            data = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1, dtype=np.float32)
        elif data.shape[1] != self.channels:
            return None
        return data

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


def segment_record(meta: dict, first: int, last: int) -> dict:
    """What `<field>_segment` holds for segments `first`..`last` of a recording's metadata:
    one segment's own record as stored (its start and end in seconds as listed, its other
    fields such as a speaker) with "key" (the recording's, unless the segment has its own),
    "txt" ("" when it has none), "index" (its place in the recording's list) and
    "recording_key"; merged segments give their texts joined by spaces, the first one's start,
    the last one's end, "index" and "last_index", and their records as "segments".

    Args:
        meta: the recording's metadata ({"key", "segments": [...], ...}).
        first, last: the segments' indices in meta["segments"].
    """
    segments = meta["segments"][first:last + 1]
    key = meta.get("key")
    if first == last:
        seg = segments[0]
        return {"key": key, **seg, "txt": seg.get("txt") or "", "start": float(seg["start"]),
                "end": float(seg["end"]), "index": first, "recording_key": key}
    texts = (seg.get("txt") or "" for seg in segments)
    return {"key": key, "txt": " ".join(t for t in texts if t),
            "start": float(segments[0]["start"]), "end": float(segments[-1]["end"]),
            "index": first, "last_index": last, "recording_key": key,
            "segments": [dict(seg) for seg in segments]}


def create(spec: ProducerSpec) -> AudioProducer:
    return AudioProducer(spec)


candidates = no_candidates


def _rate(value, field: str, where) -> int | None:
    """The `sample_rate` option as a positive whole number of Hz (None: none given). A zero or
    negative rate failed every sample as if the dataset were damaged."""
    if value is None:
        return None
    try:
        rate = float(value)
        ok = not isinstance(value, bool) and rate.is_integer() and rate >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"field {field!r} of {where}: sample_rate must be a positive whole "
                         f"number of Hz (e.g. 16000), got {value!r}")
    return int(rate)
