"""Producer `video-dali` (field option `backend="dali"` of a video field): the same clips as
the cpu video producer -- the same frame numbers from the same (seed, epoch, id) plan and
buckets, the same fill-resize and crop, layout, dtype, range and `ar` -- decoded by DALI's
`fn.decoders.video` fed with the container bytes (docs/design.md, "Video clips").

On device="cuda" the graph decodes on NVDEC (device "mixed") and resizes, crops and converts on
the GPU, writing the Pipeline's device tensor; on device="cpu" it runs in DALI's CPU-only mode,
the twin tested against the cpu producer. Which codecs each mode decodes:
`_dali_video_graph.DECODABLE_CODECS` (the CPU mode: VP8, VP9, MJPEG).

A batch DALI fails on is decoded again sample by sample: a sample that fails alone and that
FFmpeg cannot decode either is corrupt (status 1: the Pipeline substitutes it); one that FFmpeg
decodes is a codec or container DALI cannot read, which raises BackendUnavailableError naming
the sample, its shard and backend 'cpu' -- it is never silently taken from another decoder.
An MJPEG sample is first demuxed (not decoded) with PyAV: one whose stored frames are not all
there, or whose clip frames are not whole JPEGs, fails without reaching DALI, whose decoder
returns pictures for such frames (`_mjpeg_damage`; docs/video.md, "Backends").

`decode_video` decodes a video that is no sample (the inference loader's file requests) with
the same graph inputs and the same error handling.
"""

from __future__ import annotations

import io
import os
from dataclasses import replace

import numpy as np

from chute._device import require_cuda, usable_cpu_count
from chute._fork import ProcessLock
from chute.errors import BackendUnavailableError, ChuteError, DecodeError
from chute.fallbacks import fill_and_crop
from chute.pipelines.producers._contract import (
    EpochReader,
    Output,
    ProducerSpec,
    SequentialEpoch,
    no_candidates,
)
from chute.pipelines.producers._dali._graph import import_dali
from chute.pipelines.producers._dali._output import write_native
from chute.pipelines.producers.video._cpu import VideoProducer
from chute.pipelines.producers.video._dali_graph import (
    DECODABLE_CODECS,
    DaliVideoConfig,
    build_video_pipeline,
)

__all__ = ["DaliVideoProducer", "create", "candidates"]


class DaliVideoProducer(VideoProducer):
    """The cpu video producer's options, plan parameters and shapes; DALI fills the clips."""

    name = "video-dali"

    # what an error about a codec DALI cannot read says to do instead (None: a Pipeline's
    # VideoOptions(backend='cpu'); the inference loader names its own option)
    remedy: str | None = None

    def __init__(self, spec: ProducerSpec):
        super().__init__(spec)
        import_dali()
        self.device_id = None
        if spec.device.startswith("cuda"):
            require_cuda("video backend 'dali'", spec.device)
            self.device_id = int(spec.device.partition(":")[2] or 0)
        threads = int(self.options.threads or usable_cpu_count())
        self.config = DaliVideoConfig(
            batch_size=spec.batch_size, device_id=self.device_id, resize=not self.native,
            rotate=bool(np.any(self._rotation)),
            dtype=self.dtype, layout=self.layout, num_threads=threads)
        # per sample: 0 not yet looked at, _MJPEG (a damaged MJPEG stream: each clip is checked
        # before its decode), _OTHER (another codec, or MJPEG with every frame whole: no check)
        self._codecs = np.zeros(len(spec.dataset), np.int8)
        self._lock = ProcessLock()  # one DALI pipeline per graph: runs take turns
        # graph config -> its built pipeline (a second one, with rotation, only when a video
        # file given to `decode_video` is rotated and the dataset's videos are not)
        self._pipes: dict[DaliVideoConfig, object] = {}
        self._pipe_pid = 0
        self._inherited: list = []  # a forked child's copies of the parent's pipelines, never used

    def outputs(self) -> dict[str, Output]:
        found = super().outputs()
        if self.device_id is not None:  # DALI's GPU output is copied straight into the tensor
            found[self.field] = replace(found[self.field], on_device=True)
        return found

    def open_epoch(self, plan, first_iteration: int) -> EpochReader:
        # DALI decodes each batch in `fill`: whatever reader the cpu producer uses, not that
        return SequentialEpoch(self, first_iteration)

    # ---- one batch ------------------------------------------------------------------------

    def _inputs(self, request) -> list[dict[str, np.ndarray]]:
        """Each sample's graph inputs (external source name -> array)."""
        ids = request.ids
        t, h, w = self._clip_shape(request)
        views = self.dataset.views(ids, self.field)
        crops = self._crop_fractions(request)
        return [self._graph_input(views[k], self.indices(request, k, t), int(self._rotation[i]),
                                  (int(self._heights[i]), int(self._widths[i])), (h, w), crops[k])
                for k, i in enumerate(ids.tolist())]

    def _graph_input(self, encoded, frames: np.ndarray, rotation: int, stored: tuple[int, int],
                     size: tuple[int, int], crop) -> dict[str, np.ndarray]:
        """One clip's graph inputs (external source name -> array): frames `frames` of the
        video `encoded`, turned by `rotation` and, when the graph resizes, filled to `size`
        from its `stored` (height, width) and cropped at `crop` (None: centred)."""
        sample = {"encoded": encoded, "frames": frames.astype(np.int32),
                  "angle": np.float32(rotation)}
        if self.config.resize:
            # stored sizes are at display orientation; the decoder gives coded frames
            coded = stored[::-1] if rotation in (90, 270) else stored
            fill, top, left = fill_and_crop(*coded, rotation, size, crop)
            sample.update(fill=np.array(fill, np.float32), shape=np.array(size, np.int32),
                          anchor=np.array((top, left), np.int32))
        return sample

    def _run(self, samples, stream, config: DaliVideoConfig | None = None):
        """Decode `samples` through the graph of `config` (default: the dataset's): DALI's
        output batch, bound to `stream` (the caller's CUDA stream; None in CPU mode). A
        RuntimeError from here is DALI's, and the pipeline that raised it is dropped (DALI
        documents a pipeline that raised as unusable)."""
        config = config or self.config
        if self._pipes and self._pipe_pid != os.getpid():
            # forked: DALI's threads stayed in the parent; keep the copies alive, never run them
            self._inherited.extend(self._pipes.values())
            self._pipes = {}
        pipe = self._pipes.get(config)
        if pipe is None:
            pipe = self._pipes[config] = build_video_pipeline(config)
            self._pipe_pid = os.getpid()
        try:
            for name in config.inputs():
                pipe.feed_input(name, [s[name] for s in samples])  # type: ignore[attr-defined]
            # outputs bound to the caller's stream: the copy enqueued on it runs after DALI
            (clips,) = pipe.run() if stream is None else pipe.run(stream)  # type: ignore[attr-defined]
        except ChuteError:
            raise
        except RuntimeError:
            self._pipes.pop(config, None)
            raise
        return clips

    def _stream(self, target):
        """The caller's CUDA stream, which the clips are copied on (None in CPU mode)."""
        if self.device_id is None:
            return None
        import torch

        if not (isinstance(target, torch.Tensor) and target.is_cuda):
            raise TypeError(f"video backend 'dali' on a GPU writes into a CUDA tensor, not a "
                            f"{type(target).__name__}; pass the Pipeline's device buffer")
        return torch.cuda.current_stream(target.device)

    def fill(self, request, out: dict) -> np.ndarray:
        ids = request.ids
        self.write_conditioning(request, out)
        status = np.zeros(len(ids), np.uint8)
        if not len(ids):
            return status
        samples = self._inputs(request)
        target = out[self.field]
        stream = self._stream(target)
        damaged = self._damaged(ids, samples)
        if damaged.any():  # never fed to DALI: the others decode one by one
            with self._lock:
                for k in range(len(ids)):
                    if damaged[k]:
                        status[k] = 1
                        target[k:k + 1] = 0
                    else:
                        status[k] = self._retry(int(ids[k]), samples[k], target[k:k + 1],
                                                stream)
            return status

        def retry(k: int) -> None:
            status[k] = self._retry(int(ids[k]), samples[k], target[k:k + 1], stream)

        with self._lock:
            self._decode_runs(samples, target, stream, self.config, retry)
        return status

    def _decode_runs(self, samples: list[dict], target, stream, config: DaliVideoConfig,
                     retry) -> None:
        """Decode `samples` into `target` through the graph of `config`, in runs of its batch
        size: a caller may ask for more rows (the inference loader's requests of several clips
        each), which DALI refuses as a whole. Each row of a run DALI fails on is handed to
        `retry(row)`. Called under the lock."""
        step = config.batch_size
        for first in range(0, len(samples), step):
            try:
                clips = self._run(samples[first:first + step], stream, config)
            except ChuteError:  # e.g. BackendUnavailableError: no sample's fault
                raise
            except RuntimeError:  # DALI's: the run holds a sample it cannot decode
                for k in range(first, min(first + step, len(samples))):
                    retry(k)
            else:
                # not under the except: a failed copy is no sample's fault
                write_native(clips, target[first:first + step])

    def _damaged(self, ids: np.ndarray, samples: list[dict]) -> np.ndarray:
        """Which rows are MJPEG samples whose wanted frames are not whole JPEGs
        (`_mjpeg_damage`). A sample is looked at whole once: another codec, or MJPEG with every
        frame whole, is never demuxed again; only a damaged MJPEG stream is checked per clip."""
        damaged = np.zeros(len(ids), bool)
        rows = [k for k, i in enumerate(ids.tolist()) if self._codecs[i] != _OTHER]
        if not rows:
            return damaged
        pts = self.dataset.reader("pts").read(ids[rows])
        # on the cpu producer's decoding threads: a batch's checks run side by side
        found = self._pool.map(
            _sample_damage, [samples[k]["encoded"] for k in rows],
            [stamps[:int(self._frames[ids[k]])] for k, stamps in zip(rows, pts, strict=True)],
            [samples[k]["frames"] for k in rows], [self._codecs[ids[k]] for k in rows])
        for k, (code, bad) in zip(rows, found, strict=True):
            self._codecs[int(ids[k])] = code
            damaged[k] = bad
        return damaged

    def _alone(self, sample: dict, target, stream, config: DaliVideoConfig, pts, what: str,
               remedy: str) -> str | None:
        """Decode one sample or clip alone into `target`: None when DALI decodes it, else
        DALI's reason when FFmpeg cannot decode it either (it is corrupt). A ChuteError (no
        sample's fault) propagates.

        Args:
            pts: a callable giving its video's frame timestamps, which FFmpeg needs (called
                only when DALI fails).
            what: what an error calls it.
            remedy: what an error says to use instead.

        Raises:
            BackendUnavailableError: DALI fails on it and FFmpeg decodes it (`_unreadable`).
        """
        try:
            clips = self._run([sample], stream, config)
        except ChuteError:
            raise
        except RuntimeError as err:
            reason = _dali_reason(err)
        else:
            write_native(clips, target)
            return None
        codec = _ffmpeg_codec(sample["encoded"], pts(), sample["frames"])
        if codec is None:
            return reason
        raise _unreadable(config, what, codec, reason, remedy)

    def _retry(self, i: int, sample: dict, target, stream) -> int:
        """One sample alone (of a failed batch, or beside a damaged one): 0 when it decodes, 1
        when it is corrupt; raises when DALI cannot read what FFmpeg can."""
        shard, local = self.dataset.locate(i)
        reason = self._alone(
            sample, target, stream, self.config,
            lambda: self.dataset.reader("pts").read(np.array([i]))[0][:int(self._frames[i])],
            f"sample {i} ({self.field!r}, shard {shard} item {local} of {self.dataset.path})",
            self.remedy or f"the cpu video backend: fields={{{self.field!r}: "
            "VideoOptions(backend='cpu')}")
        if reason is None:
            return 0
        target[:] = 0
        return 1

    # ---- a video that is no dataset sample (the inference loader's file requests) ------------

    def video_damaged(self, data, pts) -> bool:
        """Whether the video `data` (no sample of the dataset: a file) is an MJPEG stream with
        a stored frame missing or not a whole JPEG. Only such a video's clips can be damaged:
        `decode_video(..., damaged=False)` skips their check for any other, as `fill` does for
        a sample it has looked at once (`_mjpeg_damage`).

        Args:
            data: the container's bytes (bytes-like or a uint8 array).
            pts: each frame's timestamp (`chute.convert.probe_video`).
        """
        return bool(_mjpeg_damage(_as_buffer(data), np.asarray(pts), None))

    def decode_video(self, data, frames, rotation: int, stored: tuple[int, int], target, *,
                     pts, name: str, damaged: bool | None = None) -> None:
        """Clips of one encoded video that is not a sample of the dataset (a file), decoded
        by this producer's graph as an evaluation clip of a sample is (fill-resize to the
        producer's size and centre crop, or the stored size when it has none), in chunks of
        at most the graph's batch size.

        Args:
            data: the container's bytes (bytes-like or a uint8 array).
            frames: int [N, T] frame numbers (presentation order) of its N clips.
            rotation: degrees counter-clockwise display turns it (0, 90, 180, 270).
            stored: its (height, width) at display orientation.
            target: the clips' destination, [N, 3, T, H, W] (layout "CTHW"; [N, T, 3, H, W]
                for "TCHW") in the producer's dtype: a numpy array in CPU mode, a contiguous
                CUDA tensor on a GPU.
            pts: each frame's timestamp (`chute.convert.probe_video`), which FFmpeg needs to
                tell a corrupt video from a codec DALI cannot read when DALI fails.
            name: what errors call the video (e.g. its path).
            damaged: `video_damaged(data, pts)` when the caller keeps it (False: no clip is
                checked for MJPEG damage); None checks the clips.

        Raises:
            DecodeError: a clip fails in DALI and in FFmpeg (a corrupt video).
            BackendUnavailableError: a clip fails in DALI alone (a codec or container DALI
                cannot read here, which FFmpeg decodes); its message names backend 'cpu'.
        """
        frames = np.asarray(frames, np.int32).reshape(len(target), -1)
        rotation = int(rotation) % 360
        config = replace(self.config, rotate=True) if rotation else self.config
        buffer = _as_buffer(data)
        stored = (int(stored[0]), int(stored[1]))
        samples = [self._graph_input(buffer, clip, rotation, stored, self.size or stored, None)
                   for clip in frames]
        stream = self._stream(target)
        if damaged is not False:
            damage = _mjpeg_damage(buffer, np.asarray(pts), frames.reshape(-1))
            if damage:
                raise DecodeError(f"{name} does not decode ({damage})")

        def retry(k: int) -> None:  # which clip DALI fails on, and is the video corrupt?
            self._video_clip(samples[k], target[k:k + 1], stream, config, pts, name)

        with self._lock:
            self._decode_runs(samples, target, stream, config, retry)

    def _video_clip(self, sample: dict, target, stream, config, pts, name: str) -> None:
        """One clip of `decode_video` alone, after its run failed in DALI."""
        reason = self._alone(sample, target, stream, config, lambda: pts, name,
                             self.remedy or "backend='cpu'")
        if reason is not None:
            raise DecodeError(f"{name} does not decode (DALI and FFmpeg both fail on frames "
                              f"{sample['frames'].tolist()}; DALI says: {reason})")

    def close(self) -> None:
        with self._lock:
            self._pipes = {}
        super().close()


_MJPEG, _OTHER = 1, 2
_SOI, _EOI = b"\xff\xd8", b"\xff\xd9"


def _as_buffer(data) -> np.ndarray:
    """A video's container bytes (bytes-like or a uint8 array) as a uint8 array."""
    if isinstance(data, (bytes, bytearray)):
        return np.frombuffer(data, np.uint8)
    return np.asarray(data, np.uint8)


def _sample_damage(data, pts, frames, code: int) -> tuple[int, bool]:
    """(the sample's code, whether the clip `frames` is damaged) for a sample whose code is
    `code`: not looked at (0: the whole stream is checked once) or _MJPEG (damaged somewhere:
    the clip's frames are checked)."""
    if code == 0:
        why = _mjpeg_damage(data, pts, None)
        if not why:  # None (not MJPEG) or "" (every frame whole): no clip of it is damaged
            return _OTHER, False
    return _MJPEG, bool(_mjpeg_damage(data, pts, frames))


def _mjpeg_damage(data, pts, frames) -> str | None:
    """None when `data` is not MJPEG; for MJPEG, "" when every stored frame demuxes and the
    packets of `frames` (None: every frame) are whole JPEGs (SOI first, EOI last, trailing
    zero padding allowed), else what is wrong.

    DALI's CPU-mode decoder returns pictures for MJPEG frames that FFmpeg's demuxer no longer
    finds or finds cut (docs/video.md, "Backends"); checking what FFmpeg demuxes, without
    decoding, fails those samples instead (corrupt data never yields a wrong sample)."""
    import av

    view = memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]
    wanted = ({int(p) for p in np.asarray(pts).tolist()} if frames is None else
              {int(pts[f]) for f in np.asarray(frames).tolist()})
    seen: set[int] = set()
    whole: dict[int, bool] = {}  # a wanted frame's last packet: a whole JPEG?
    try:
        container = av.open(io.BytesIO(view), "r")
    except (av.error.FFmpegError, ValueError):
        return None  # no container to look into: DALI's and FFmpeg's decodes tell
    with container:
        streams = container.streams.video
        context = streams[0].codec_context if streams else None
        if context is None or context.name != "mjpeg":
            return None
        try:
            # the packets the probe counted as frames (chute.convert.probe_video)
            for packet in container.demux(streams[0]):
                if packet.pts is None or not packet.size or packet.is_discard:
                    continue
                seen.add(packet.pts)
                if packet.pts in wanted:
                    jpeg = bytes(packet)
                    whole[packet.pts] = (jpeg.startswith(_SOI)
                                         and jpeg.rstrip(b"\0").endswith(_EOI))
        except av.error.FFmpegError as exc:
            return f"its MJPEG stream does not demux ({exc})"
    missing = len(set(np.asarray(pts).tolist()) - seen)
    if missing:
        return f"{missing} of its {len(pts)} MJPEG frames are not in the stream"
    for stamp in sorted(wanted):
        if not whole[stamp]:
            return f"its MJPEG frame at pts {stamp} is not a whole JPEG"
    return ""


def _ffmpeg_codec(data, pts, frames) -> str | None:
    """The codec of a video FFmpeg decodes (frames `frames`), else None (corrupt)."""
    import av

    from chute.fallbacks import decode_frames

    try:
        decode_frames(data, pts, frames)
        # numpy's stubs give ndarray __buffer__ on Python >= 3.12 only
        view = memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]
        with av.open(io.BytesIO(view)) as container:
            return container.streams.video[0].codec_context.name
    except (DecodeError, av.error.FFmpegError, IndexError, ValueError):
        return None


def _unreadable(config: DaliVideoConfig, what: str, codec: str, reason: str,
                remedy: str) -> BackendUnavailableError:
    """The error for `what` (a sample, a file) DALI fails and FFmpeg decodes."""
    mode = config.decoder_device
    return BackendUnavailableError(
        f"video backend 'dali' ({'GPU' if mode == 'mixed' else 'CPU'} mode) cannot decode "
        f"{what}: codec {codec!r}, which FFmpeg decodes; DALI says: {reason}. DALI decodes "
        f"{', '.join(DECODABLE_CODECS[mode])} in this mode. Use {remedy}.")


def _dali_reason(err: Exception) -> str:
    """The operator's message in a DALI pipeline error (the line after "encountered:")."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    after = lines.index("encountered:") + 1 if "encountered:" in lines else 0
    return lines[after][:200] if after < len(lines) else repr(err)


def create(spec: ProducerSpec) -> DaliVideoProducer:
    return DaliVideoProducer(spec)


candidates = no_candidates
