"""Producer `video-nvdec` (field option `backend="nvdec"` of a video field): the same clips as
the cpu video producer -- the same frame numbers from the same (seed, epoch, id) plan and
buckets, the same fill-resize and crop, layout, dtype, range and conditioning outputs --
decoded on the GPU's hardware video decoders (NVDEC) through PyNvVideoCodec, then resized,
cropped and converted by chute's CUDA kernel (`chute.kernels.resize_normalize`) into the
Pipeline's device tensor (docs/video.md, "The nvdec backend").

- Decoding: K decode workers (threads), each with its own CUDA stream and its own
  `SimpleDecoder` session kept for the producer's life: a new video reconfigures the session
  (PyNvVideoCodec keeps a small cache of hardware decoders by stream format), so batches and
  epochs reuse decoders instead of creating one per video. A sample's video is handed over as
  the shard's bytes (an in-memory source), never written to a file. Each clip asks for its
  distinct frame numbers (`_nvdec_plan.frame_request`) in RGB, which are copied into one
  device tensor on the worker's stream (turned to display orientation there); the worker
  host-waits on an event after that copy, so the decoder's own frames are never reused or freed
  under a reader.
- Resampling: on the caller's current stream, after waiting on each clip's event; the clips'
  tensors are marked as used on that stream (`record_stream`), so the allocator keeps them
  until the kernel is done. The contract's rule holds: the writes are enqueued on the caller's
  stream when `read` returns (docs/pipeline.md, "Batches in flight").
- Look-ahead: the cpu producer's epoch reader queues the next batch's clips before waiting for
  the current one, so several clips are in flight on the K workers.
- Fallback: a video NVDEC cannot decode on this GPU -- its codec, chroma format or bit depth
  refused by `GetDecoderCaps` (read per stream format, not a fixed list), its size out of the
  decoder's range, a variable frame rate, an MPEG-4 packed bitstream (whose chunks hold two
  pictures), or a frame count other than the stored one -- is
  decoded by the cpu backend, per sample, counted in the Pipeline's stage counters
  ("FIELD/nvdec:cpu:REASON") and said once per reason in the log. A sample that the cpu
  backend cannot decode either fails (status 1: the Pipeline substitutes it).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chute._device import cuda_device_count, require_cuda, usable_cpu_count
from chute._fork import ProcessPool
from chute.errors import BackendUnavailableError
from chute.pipelines.producers._contract import Output, ProducerSpec, no_candidates
from chute.pipelines.producers.video._cpu import VideoProducer
from chute.pipelines.producers.video._nvdec_plan import (
    caps_refusal,
    clip_box,
    constant_rate,
    frame_request,
    packed_mpeg4,
)

__all__ = ["NvdecVideoProducer", "create", "candidates", "import_nvc", "nvdec_import_error"]

_log = logging.getLogger("chute")

INSTALL_HINT = ("install PyNvVideoCodec with chute's GPU extra (pip install 'chute[gpu-cu13]', "
                "or gpu-cu12 for CUDA 12) on a machine with an NVIDIA driver, or use "
                "VideoOptions(backend='cpu')")
_MAX_DECODERS = 4  # decode workers (NVDEC sessions) per producer: H100/H200 have 7 engines
# per-sample verdicts: not looked at yet, NVDEC decodes it, the cpu backend does
_UNKNOWN, _NVDEC, _CPU = 0, 1, 2


def import_nvc():
    """PyNvVideoCodec, imported at first use (it loads the driver's decoder libraries)."""
    try:
        import PyNvVideoCodec as nvc
    except Exception as exc:  # no driver: its import raises RuntimeError, not ImportError
        raise BackendUnavailableError(
            f"video backend 'nvdec' cannot import PyNvVideoCodec ({type(exc).__name__}: "
            f"{exc}); {INSTALL_HINT}") from exc
    return nvc


def nvdec_import_error() -> str | None:
    """Why the nvdec backend cannot run here (PyNvVideoCodec or a CUDA device missing), or
    None."""
    try:
        import_nvc()
    except BackendUnavailableError as exc:
        return str(exc)
    if cuda_device_count() == 0:
        return "no CUDA device"
    return None


@dataclass
class _Session:
    """One decode worker's NVDEC session, CUDA stream and source, kept across batches."""

    stream: Any
    decoder: Any = None


@dataclass
class _Clip:
    """One sample's decoded clip, waiting for the resample: its distinct frames on the device
    (`frames`, [U, H, W, 3] at display orientation) and the event after their copy; or the cpu
    backend's clip (`host`, None when that failed too)."""

    frames: Any = None
    gather: np.ndarray | None = None
    decoded: Any = None
    host: np.ndarray | None = None
    failed: bool = False


class NvdecVideoProducer(VideoProducer):
    """The cpu video producer's options, plan parameters and shapes; NVDEC decodes the clips."""

    name = "video-nvdec"

    def __init__(self, spec: ProducerSpec, device_id: int):
        super().__init__(spec)
        self.nvc = import_nvc()
        self.device_id = device_id
        workers = min(_MAX_DECODERS, int(self.options.threads or usable_cpu_count()))
        self._workers = ProcessPool(workers, "chute-nvdec")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._verdicts = np.zeros(len(spec.dataset), np.int8)
        self._reasons: dict[int, str] = {}
        self._caps: dict[tuple, str | None] = {}  # (codec, chroma, bit depth, h, w) -> refusal
        self._said: set[str] = set()
        # coded sizes of every video: one session reconfigures to any of them
        self._max_side = int(max(self._heights.max(initial=1), self._widths.max(initial=1)))

    def outputs(self) -> dict[str, Output]:
        found = super().outputs()
        found[self.field] = replace(found[self.field], on_device=True)  # the kernel writes it
        return found

    # ---- on the decode workers -------------------------------------------------------------

    def _submit_clip(self, job):
        return self._workers.submit(self._decode_clip, job)

    def _session(self) -> _Session:
        session = getattr(self._local, "session", None)
        if session is None or getattr(self._local, "pid", None) != os.getpid():
            session = self._local.session = _Session(_new_stream(self.device_id))
            self._local.pid = os.getpid()
        return session

    def _decode_clip(self, job) -> _Clip:
        data, pts, keyframes, i, indices, size, crop = job
        verdict = self._verdict(i, data, pts)
        if verdict == _NVDEC:
            try:
                return self._on_nvdec(self._session(), data, i, indices)
            except _Refused as refused:
                self._to_cpu(i, str(refused))
        self._fall_back(i)
        clip = self._clip(job)
        return _Clip(host=clip, failed=clip is None)

    def _verdict(self, i: int, data, pts) -> int:
        """Whether NVDEC decodes sample `i` (looked at once, then kept for every epoch)."""
        if self._verdicts[i] != _UNKNOWN:
            return int(self._verdicts[i])
        frames = int(self._frames[i])
        if packed_mpeg4(data):  # (its guessed timestamps may also look variable)
            self._to_cpu(i, "packed MPEG-4 B-frames")
        elif not constant_rate(pts[:frames]):
            self._to_cpu(i, "variable frame rate")
        else:
            refusal = self._refusal(i, data)
            if refusal is None:
                self._verdicts[i] = _NVDEC
            else:
                self._to_cpu(i, refusal)
        return int(self._verdicts[i])

    def _refusal(self, i: int, data) -> str | None:
        """Why this GPU's decoder refuses sample `i`'s stream (its capabilities for the
        stream's codec, chroma format and bit depth), or None."""
        try:
            demuxer = self.nvc.CreateDemuxer(_Feeder(data).feed)
            fmt = (demuxer.GetNvCodecId(), demuxer.ChromaFormat(), demuxer.BitDepth())
        except Exception as exc:  # the demuxer's reasons are its own exception types
            return f"PyNvVideoCodec's demuxer refuses it ({type(exc).__name__})"
        height, width = int(self._heights[i]), int(self._widths[i])
        if int(self._rotation[i]) in (90, 270):  # stored sizes are at display orientation
            height, width = width, height
        key = (str(fmt[0]), str(fmt[1]), int(fmt[2]), height, width)
        if key not in self._caps:
            refusal: str | None
            try:
                caps = self.nvc.GetDecoderCaps(gpuid=self.device_id, codec=fmt[0],
                                               chromaformat=fmt[1], bitdepth=fmt[2])
            except Exception as exc:
                refusal = f"GetDecoderCaps failed ({type(exc).__name__}: {exc})"
            else:
                refusal = caps_refusal(caps, height, width)
            self._caps[key] = None if refusal is None else f"{fmt[0]}: {refusal}"
        return self._caps[key]

    def _to_cpu(self, i: int, reason: str) -> None:
        with self._lock:
            self._verdicts[i] = _CPU
            self._reasons[i] = reason

    def _fall_back(self, i: int) -> None:
        """Count sample `i`'s clip as decoded by the cpu backend; say each reason once."""
        reason = self._reasons.get(i, "?")
        kind = reason.split(":")[0].split(" (")[0]
        self.stages.count(f"{self.field}/nvdec:cpu:{kind}")
        with self._lock:
            if kind in self._said:
                return
            self._said.add(kind)
        shard, local = self.dataset.locate(i)
        _log.warning("video backend 'nvdec': sample %d (field %r, shard %s item %s of %s) is "
                     "decoded by the cpu backend: %s; every such clip is counted in "
                     "pipe.stats under %r", i, self.field, shard, local, self.dataset.path,
                     reason, f"{self.field}/nvdec:cpu:{kind}")

    def _on_nvdec(self, session: _Session, data, i: int, indices) -> _Clip:
        import torch

        wanted, gather = frame_request(indices)
        with _on_stream(session.stream):
            try:
                decoder = self._open(session, data)
                if len(decoder) != int(self._frames[i]):
                    raise _Refused(f"frame count {len(decoder)} differs from the stored "
                                   f"{int(self._frames[i])}")
                frames = decoder.get_batch_frames_by_index(wanted)
            except _Refused:
                raise
            except Exception as exc:  # its own exception types; the cpu backend decides
                session.decoder = None  # a session that raised is not reused
                raise _Refused(f"PyNvVideoCodec failed ({type(exc).__name__}: {exc})") from exc
            if len(frames) != len(wanted):
                raise _Refused(f"PyNvVideoCodec returned {len(frames)} of {len(wanted)} frames")
            # one tensor the allocator owns: the decoder's frames are free after the host wait
            stacked = torch.stack([torch.from_dlpack(f) for f in frames])
            turns = int(self._rotation[i]) // 90
            if turns:
                stacked = torch.rot90(stacked, k=turns, dims=(1, 2)).contiguous()
            decoded = _new_event()
            decoded.record(session.stream)
        decoded.synchronize()
        return _Clip(frames=stacked, gather=gather, decoded=decoded)

    def _open(self, session: _Session, data):
        """The session's decoder, moved to video `data` (one decoder per session)."""
        source = memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]
        if session.decoder is not None:
            try:
                session.decoder.reconfigure_decoder(source)
                return session.decoder
            except Exception:  # a source it cannot move to: a new session below
                session.decoder = None
        self.stages.count(f"{self.field}/nvdec:sessions")
        # scanned metadata: a container whose header holds no frame count (Matroska) is
        # counted from its packets, and `_on_nvdec` holds that count to the stored one
        session.decoder = self.nvc.SimpleDecoder(
            source, gpu_id=self.device_id, cuda_stream=_stream_pointer(session.stream),
            use_device_memory=True, max_width=self._max_side, max_height=self._max_side,
            need_scanned_stream_metadata=True, output_color_type=self.nvc.OutputColorType.RGB)
        return session.decoder

    # ---- on the Pipeline's thread ------------------------------------------------------------

    def _collect(self, request, jobs: list, out: dict) -> np.ndarray:
        import torch

        from chute.kernels import resize_normalize

        target = out[self.field]
        self.write_conditioning(request, out)
        caller = _current_stream(target)
        t, h, w = self._clip_shape(request)
        crops = self._crop_fractions(request)
        status = np.zeros(len(jobs), np.uint8)
        rows, sources, boxes, held = [], [], [], []
        for k, job in enumerate(jobs):
            clip = job.result()
            if clip.frames is None:
                status[k] = clip.failed
                if clip.failed:
                    target[k].zero_()
                else:
                    target[k].copy_(torch.from_numpy(clip.host))
                continue
            shown = tuple(clip.frames.shape[1:3])  # turned to display orientation
            turns = int(self._rotation[int(request.ids[k])]) // 90
            coded = shown[::-1] if turns % 2 else shown
            if self.native and shown != (h, w):
                status[k] = 1  # a height/width column that disagrees: fails, as on the cpu
                target[k].zero_()
                continue
            caller.wait_event(clip.decoded)
            box = clip_box(coded, turns * 90, None if self.native else (h, w), crops[k])
            rows.append(k)
            sources += [clip.frames[j] for j in clip.gather.tolist()]
            boxes += [box] * len(clip.gather)
            held.append(clip.frames)
        if rows:
            with self.stages.measure(f"{self.field}/resample"):
                scratch = torch.empty((len(rows) * t, 3, h, w), dtype=target.dtype,
                                      device=target.device)
                resize_normalize(sources, np.asarray(boxes, np.float32),
                                 np.zeros(len(sources), bool), scratch, layout="NCHW",
                                 mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), stream=caller)
                clips = scratch.view(len(rows), t, 3, h, w)
                if self.layout == "CTHW":
                    clips = clips.permute(0, 2, 1, 3, 4)
                index = torch.as_tensor(rows, device=target.device)
                target.index_copy_(0, index, clips)
            for frames in held:
                _keep_until(frames, caller)
        return status

    def close(self) -> None:
        self._workers.shutdown()
        super().close()


class _Refused(Exception):
    """NVDEC cannot decode this sample (the message says why): the cpu backend does."""


class _Feeder:
    """Feeds a video's bytes to PyNvVideoCodec's demuxer in the chunks it asks for."""

    def __init__(self, data):
        self.data = memoryview(np.ascontiguousarray(data)).cast("B")
        self.pos = 0

    def feed(self, buffer) -> int:
        n = min(len(buffer), len(self.data) - self.pos)
        if n > 0:
            buffer[:n] = self.data[self.pos:self.pos + n]
            self.pos += n
        return max(n, 0)


# ---- CUDA resources (replaced by fakes in the CPU tests: tests/pipelines/_fake_cuda.py) -----

def _new_stream(device_id: int):
    import torch

    return torch.cuda.Stream(torch.device("cuda", device_id))


def _new_event():
    import torch

    return torch.cuda.Event()


def _stream_pointer(stream) -> int:
    return int(stream.cuda_stream)


def _on_stream(stream):
    import torch

    return torch.cuda.stream(stream)


def _keep_until(tensor, stream) -> None:
    """The allocator keeps `tensor` until the work enqueued on `stream` so far is done."""
    tensor.record_stream(stream)


def _current_stream(target):
    """The caller's current CUDA stream on the device of `target`, the output tensor."""
    import torch

    if getattr(target, "is_cuda", False):
        return torch.cuda.current_stream(target.device)
    raise TypeError(f"video backend 'nvdec' writes into a CUDA tensor, not a "
                    f"{type(target).__name__}; pass the Pipeline's device buffer")


def create(spec: ProducerSpec) -> NvdecVideoProducer:
    """The nvdec video producer (fails fast, naming what to do, where it cannot run)."""
    if not spec.device.startswith("cuda"):
        raise BackendUnavailableError(
            f"video backend 'nvdec' of field {spec.field!r} decodes on the GPU, but the "
            f"Pipeline's device is {spec.device!r}; pass device='cuda' or use "
            "VideoOptions(backend='cpu')")
    require_cuda("video backend 'nvdec'", spec.device)
    return NvdecVideoProducer(spec, int(spec.device.partition(":")[2] or 0))


candidates = no_candidates
