"""Producer `video`: clips of `num_frames` frames decoded on the CPU (FFmpeg through PyAV)
from container bytes, only the span each clip needs, resized to fill `size` by FFmpeg's scaler
(antialiased bilinear, in the colour conversion pass) and centre-cropped, in parallel across
samples (docs/design.md, "Video clips").

Options: the field's `VideoOptions` (`video/_options.py`, the only place their defaults are
written; a spec built by hand may give a dict of them, `video/_spec.py`): num_frames,
frame_interval, size ((H, W); None keeps the stored size, which must then agree within a
batch), dtype ("uint8", or "float32"/"float16" scaled to [-1, 1]), layout ("CTHW" ->
[B, 3, T, H, W] | "TCHW" -> [B, T, 3, H, W]), threads (decoding threads; None: CPU count),
crop ("center", or "random": in training the crop's position is keyed by (seed, epoch, sample
id); evaluation always centres).

Reads in plan order queue the next batch's clips before waiting for the current one
(`pipelines/producers/video/_epoch.py`), so the decoding threads do not idle at batch boundaries.

Besides the clips it delivers the conditioning text-to-video models take (Open-Sora's
`num_frames`, `height`, `width`, `fps`, `ar`), each of the clip as delivered, not of the stored
file (docs/video.md, "Conditioning"): `ar` (float32 [B]: H / W of the delivered clip under
buckets, the bucket's output size, else the sample's stored height / width), `clip_num_frames`
(int64 [B]: frames in the clip), `clip_height`, `clip_width` (int64 [B]: the clip's output size),
`clip_fps` (float32 [B]: the stored rate / frame_interval, the rate the clip plays at) and
`clip_valid_frames` (int64 [B]: frames of the clip that are distinct frames of the video; the
rest repeat its last frame when the video is shorter than the clip).
"""

from __future__ import annotations

import os
from concurrent.futures import Future

import numpy as np

from chute._fork import ProcessPool
from chute.errors import DecodeError, FormatError
from chute.pipelines._common._stages import StageTimes
from chute.pipelines.producers._contract import (
    EpochReader,
    Output,
    ProducerSpec,
    StoredFieldProducer,
    no_candidates,
)
from chute.pipelines.producers.video._clips import ClipParams, clip_indices
from chute.pipelines.producers.video._crop import VideoCropParams
from chute.pipelines.producers.video._epoch import VideoEpoch
from chute.pipelines.producers.video._options import clip_size
from chute.pipelines.producers.video._spec import video_options

__all__ = ["VideoProducer", "create", "candidates"]

AR_KEY = "ar"
# The delivered clip's conditioning values (Open-Sora's num_frames, height, width, fps).
CONDITIONING = {"clip_num_frames": np.int64, "clip_height": np.int64, "clip_width": np.int64,
                "clip_fps": np.float32, "clip_valid_frames": np.int64}


class VideoProducer(StoredFieldProducer):
    name = "video"

    def __init__(self, spec: ProducerSpec):
        self.stages = StageTimes()  # the Pipeline gives its own (pipelines/_common/_stages.py)
        # VideoOptions (checked when made), or a hand-built dict converted once
        options, self.buckets = video_options(spec)
        self.options = options
        self.field = spec.field
        self.dataset = spec.dataset
        self.num_frames = int(options.num_frames)
        self.frame_interval = int(options.frame_interval)
        self.size = clip_size(options.size)
        # With buckets (self.buckets) the plan gives each batch its frame count and size
        # (request params). Neither size nor buckets: clips keep the stored size (decoded at
        # native size).
        self.native = self.size is None and self.buckets is None
        self.dtype = options.dtype
        self.layout = options.layout
        self.mode = spec.augment
        self.spread = options.sampling == "uniform"
        # Evaluation is deterministic and centred whatever the option says.
        self.random_crop = options.crop == "random" and self.mode == "train"
        needed = [c for c in ("num_frames", "height", "width", "pts", "rotation", "fps")
                  if c not in spec.dataset.fields]
        if needed:
            why = spec.dataset.why_missing(needed[0])  # a mix: a source lacks it (not convert)
            raise FormatError(f"field {spec.field!r} of {spec.dataset.path} holds video but "
                              f"the dataset lacks {needed}; "
                              + (why if why else "convert it with `chute convert video`"))
        self._frames = np.asarray(spec.dataset.column("num_frames"))
        self._rotation = np.asarray(spec.dataset.column("rotation"))
        self._heights = np.asarray(spec.dataset.column("height"))
        self._widths = np.asarray(spec.dataset.column("width"))
        self._fps = np.asarray(spec.dataset.column("fps"), np.float64)
        if options.short == "error" and self.buckets is None:
            self._refuse_short(spec)
        self._pool = ProcessPool(int(options.threads or os.cpu_count() or 1), "chute-video")

    def _refuse_short(self, spec: ProducerSpec) -> None:
        span = self.num_frames if self.spread else \
            (self.num_frames - 1) * self.frame_interval + 1
        short = np.flatnonzero(self._frames < span)
        if short.size:
            i = int(short[0])
            raise FormatError(
                f"field {spec.field!r} of {spec.dataset.path}: {short.size} videos have fewer "
                f"frames than a clip's span of {span} (first: sample {i}, {int(self._frames[i])}"
                " frames) and short='error' refuses them; pass short='repeat' (the last frame "
                "repeats and clip_valid_frames counts the real ones), fewer frames or a "
                "smaller frame_interval")

    def indices(self, request, k: int, t: int) -> np.ndarray:
        """Frame numbers of row k's clip of `t` frames."""
        i = int(request.ids[k])
        phase = request.params.get("clip_phase")
        return clip_indices(int(request.params["clip_start"][k]), t, self.frame_interval,
                            int(self._frames[i]), None if phase is None else float(phase[k]))

    def _clip_shape(self, request) -> tuple[int, int, int]:
        """(T, H, W) of this batch's clips."""
        if "clip_frames" in request.params and len(request.ids):
            h, w = (int(v) for v in request.params["clip_size"][0])
            return int(request.params["clip_frames"][0]), h, w
        return (self.num_frames, *self._frame_shape(request.ids))

    def _frame_shape(self, ids: np.ndarray) -> tuple[int, int]:
        if self.size is not None:
            return self.size
        sizes = set(zip(self._heights[ids].tolist(), self._widths[ids].tolist(), strict=True))
        if len(sizes) > 1:
            raise FormatError(f"video option size=None keeps stored sizes, but this batch mixes "
                             f"{sorted(sizes)}; give a size or use batch_size=1")
        return sizes.pop() if sizes else (1, 1)

    def _batch_shape(self, b: int, t: int, h: int, w: int) -> tuple[int, ...]:
        return (b, 3, t, h, w) if self.layout == "CTHW" else (b, t, 3, h, w)

    def outputs(self) -> dict[str, Output]:
        if self.buckets is not None:
            t, h, w = self.buckets.max_clip_shape()
        else:
            t = self.num_frames
            h, w = self.size or (int(self._heights.max(initial=1)),
                                 int(self._widths.max(initial=1)))
        # Buckets: slots sized for the largest bucket's batch, not the largest batch size with
        # the largest clip (docs/video.md, "Buckets").
        elements = None if self.buckets is None else 3 * self.buckets.max_batch_pixels()
        # At stored sizes a clip of another size is another shape, never a padded one.
        return {self.field: Output(self._batch_shape(1, t, h, w)[1:], np.dtype(self.dtype),
                                   exact=self.native, batch_elements=elements),
                AR_KEY: Output((), np.dtype(np.float32)),
                **{key: Output((), np.dtype(dtype)) for key, dtype in CONDITIONING.items()}}

    def param_sources(self) -> tuple:
        crops = (VideoCropParams(),) if self.random_crop else ()
        if self.buckets is not None:  # the BucketPlan gives clip params per bucket
            return crops
        return (ClipParams(self.num_frames, self.frame_interval, self.mode, self._frames,
                           self.spread), *crops)

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        b = len(request.ids)
        return {self.field: self._batch_shape(b, *self._clip_shape(request)), AR_KEY: (b,),
                **{key: (b,) for key in CONDITIONING}}

    def write_conditioning(self, request, out: dict) -> None:
        """The delivered clips' conditioning values (`ar` and CONDITIONING) into `out`."""
        ids = request.ids
        t, h, w = self._clip_shape(request)
        out[AR_KEY][:] = self._aspect_ratios(request)
        if "clip_size" in request.params:  # buckets: each row's own output size
            size = np.asarray(request.params["clip_size"], np.int64).reshape(-1, 2)
            out["clip_height"][:], out["clip_width"][:] = size[:, 0], size[:, 1]
        else:
            out["clip_height"][:], out["clip_width"][:] = h, w
        out["clip_num_frames"][:] = t
        frames = self._frames[ids].astype(np.int64)
        if self.spread:  # t frames over the whole video: frames / t apart
            out["clip_fps"][:] = (self._fps[ids] * t / np.maximum(frames, 1)).astype(np.float32)
            out["clip_valid_frames"][:] = np.minimum(frames, t)
            return
        out["clip_fps"][:] = (self._fps[ids] / self.frame_interval).astype(np.float32)
        room = frames - 1 - np.asarray(request.params["clip_start"], np.int64)
        out["clip_valid_frames"][:] = np.clip(room // self.frame_interval + 1, 0, t)

    def _aspect_ratios(self, request) -> np.ndarray:
        """H / W of each sample: its bucket's output size, else its stored size."""
        if "clip_size" in request.params:
            size = np.asarray(request.params["clip_size"], np.float64).reshape(-1, 2)
            return (size[:, 0] / size[:, 1]).astype(np.float32)
        ids = request.ids
        return (self._heights[ids] / np.maximum(self._widths[ids], 1)).astype(np.float32)

    def _crop_fractions(self, request) -> list[tuple[float, float] | None]:
        """Each sample's (vertical, horizontal) crop fractions; None centres it."""
        ids, params = request.ids, request.params
        if not self.random_crop:
            return [None] * len(ids)
        return [(float(params["crop_y"][k]), float(params["crop_x"][k]))
                for k in range(len(ids))]

    def open_epoch(self, plan, first_iteration: int) -> EpochReader:
        return VideoEpoch(self, plan, first_iteration)

    def fill(self, request, out: dict) -> np.ndarray:
        return self.collect(request, self.submit(request), out)

    def submit(self, request) -> list[Future]:
        """Queue the clips of `request` on the decoding threads (one future per sample)."""
        with self.stages.measure(f"{self.field}/prepare"):
            return self._submit(request)

    def _submit(self, request) -> list[Future]:
        ids = request.ids
        t, h, w = self._clip_shape(request)
        views = self.dataset.views(ids, self.field)
        pts = self.dataset.reader("pts").read(ids)
        keys = self._keyframes(ids)
        crops = self._crop_fractions(request)
        return [self._submit_clip((views[k], pts[k], keys[k], int(ids[k]),
                                   self.indices(request, k, t), (h, w), crops[k]))
                for k in range(len(ids))]

    def _submit_clip(self, job) -> Future:
        """Queue one clip's job (`_clip`'s argument) on the decoding threads."""
        return self._pool.submit(self._clip, job)

    def _keyframes(self, ids: np.ndarray) -> list:
        """Each sample's keyframes a decode may start at (None: a dataset without the field)."""
        if "keyframes" not in self.dataset.fields:
            return [None] * len(ids)
        return list(self.dataset.reader("keyframes").read(ids))

    def collect(self, request, jobs: list[Future], out: dict) -> np.ndarray:
        """Wait for the clips `submit(request)` queued and write them into `out`."""
        with self.stages.measure(f"{self.field}/collect"):  # waiting for them, then copying
            return self._collect(request, jobs, out)

    def _collect(self, request, jobs: list[Future], out: dict) -> np.ndarray:
        target = out[self.field]
        self.write_conditioning(request, out)
        status = np.zeros(len(jobs), np.uint8)
        for k, job in enumerate(jobs):
            clip = job.result()
            if clip is None:
                status[k] = 1
                target[k] = 0
            else:
                target[k] = clip
        return status

    def _clip(self, job) -> np.ndarray | None:
        """One sample's clip in the output layout and dtype, or None when it fails."""
        from chute.fallbacks import decode_frames
        from chute.pipelines.producers.video._output import to_output

        data, pts, keyframes, i, indices, size, crop = job
        frames = int(self._frames[i])
        # size=None keeps the stored size: decode at native size and hold the frames to the
        # height/width columns, so a column that disagrees with the stream fails the sample
        # instead of resizing it to a wrong shape (docs/design.md, "Robustness testing").
        try:
            # on the decoding threads: clips overlap, their times add up past the wall time
            with self.stages.measure(f"{self.field}/decode"):
                rgb = decode_frames(data, pts[:frames], indices, int(self._rotation[i]),
                                    None if self.native else size, crop, keyframes=keyframes)
        except DecodeError:
            return None
        if rgb.shape[1:3] != tuple(size):
            return None
        return to_output(rgb, self.dtype, self.layout)

    def close(self) -> None:
        self._pool.shutdown()


def create(spec: ProducerSpec) -> VideoProducer:
    return VideoProducer(spec)


candidates = no_candidates
