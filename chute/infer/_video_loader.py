"""The loader stage for video: a batch of requests -> their clips, decoded by the `video`
producer (PyAV), the `video-dali` producer (NVDEC on a GPU, DALI's CPU-only mode on the CPU)
or the `video-nvdec` producer (NVDEC through PyNvVideoCodec, on a GPU) from the dataset's
shards (span-only decoding; docs/design.md, "Video clips") or from video files under the
loader's root (PyAV, or the `video-dali` producer's graph on backend "dali"), written straight
into shared memory (or, on a CUDA device, into device memory) so that handing them to the next
stage copies nothing (docs/inference.md, "Requests" and "Where the loader
decodes")."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chute import _device
from chute.convert import UnreadableVideo, probe_video
from chute.errors import BackendUnavailableError, DecodeError, FormatError
from chute.fallbacks import decode_frames
from chute.pipelines import (
    BatchRequest,
    ProducerSpec,
    clip_to_output,
    create_producer,
    dali_import_error,
    nvdec_import_error,
    spread_clips,
)
from chute.readers import open_dataset

__all__ = ["VideoClipLoader"]

# probed files kept per replica (a file's frame timestamps: a few KB each)
_PROBES_KEPT = 256

BACKENDS = ("auto", "cpu", "dali", "nvdec")

log = logging.getLogger("chute.infer")


def _check_device(device) -> str:
    """`device` as "cpu" or "cuda:N"; a one-line error when it is no device name, or CUDA
    where this machine has none (never a silent decode on the CPU instead)."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"VideoClipLoader(device={device!r}): expected 'cpu', 'cuda' or "
                         "'cuda:N'")
    if device == "cpu":
        return device
    index = int(device.partition(":")[2] or 0)
    count = _device.cuda_device_count()
    if index >= count:
        have = "no CUDA device" if count == 0 else f"{count} CUDA device(s)"
        raise BackendUnavailableError(
            f"VideoClipLoader(device={device!r}): this machine has {have} "
            "(torch.cuda.device_count()); place the loader stage on 'cpu' (its devices in the "
            "config) or run it where that GPU is")
    return f"cuda:{index}"


def _choose(backend, device: str, dataset) -> tuple[str, str]:
    """(backend, why) of a loader: the decoder of its dataset requests."""
    if backend not in BACKENDS:
        raise ValueError(f"VideoClipLoader(backend={backend!r}): expected one of "
                         f"{', '.join(BACKENDS)}")
    if backend == "cpu":
        return "cpu", "backend='cpu' asked for: PyAV decodes on the CPU"
    if dataset is None:
        if backend == "dali":
            raise ValueError("VideoClipLoader(backend='dali'): DALI decodes through the "
                             "dataset's video-dali producer and this loader has no dataset; "
                             "give it a dataset or use backend 'cpu' or 'auto'")
        return "cpu", "no dataset: file requests decode with PyAV on the CPU"
    if backend == "dali":
        where = "NVDEC" if device != "cpu" else "DALI's CPU-only mode (VP8, VP9, MJPEG)"
        return "dali", f"backend='dali' asked for: {where} decodes"
    if backend == "nvdec":
        if device == "cpu":
            raise ValueError("VideoClipLoader(backend='nvdec'): NVDEC decodes on a CUDA "
                             "device and this loader's device is 'cpu'; give device='cuda' "
                             "or use backend 'cpu' or 'auto'")
        return "nvdec", ("backend='nvdec' asked for: NVDEC decodes dataset requests through "
                         "PyNvVideoCodec (file requests: PyAV on the CPU, copied)")
    if device == "cpu":
        return "cpu", ("device 'cpu': PyAV decodes (DALI's CPU-only mode reads only VP8, "
                       "VP9 and MJPEG)")
    missing = dali_import_error()
    if missing is None:
        return "dali", f"device {device!r} and DALI imports: NVDEC decodes"
    no_nvdec = nvdec_import_error()
    if no_nvdec is None:
        return "nvdec", (f"device {device!r}, DALI cannot be imported ({missing}) and "
                         "PyNvVideoCodec imports: NVDEC decodes dataset requests")
    return "cpu", (f"device {device!r} but neither DALI ({missing}) nor PyNvVideoCodec "
                   f"({no_nvdec}) can run: PyAV decodes on the CPU and the clips are copied "
                   f"to {device}")


# what DALI's refusal of a codec tells a loader's user to do
_LOADER_REMEDY = ("this loader's backend='cpu' (the loader stage's option `backend: cpu`, or "
                  "`chute infer-bench --decode cpu`)")


def _size(value) -> tuple[int, int] | None:
    if value is None:
        return None
    if np.ndim(value) == 0:
        return int(value), int(value)
    height, width = (int(v) for v in value)
    return height, width


class VideoClipLoader:
    """Clips of the videos a batch of requests names (evaluation clips, centred, or spread
    over the video when a request asks for several).

    A request is a sample id of `dataset`, a path of a video file under `root`, or a dict
    `{"video": id_or_path, "clips": N}`. One clip gives [3, T, H, W] (layout "CTHW"); a
    request that asks for clips (the dict, or the loader's `clips=`) gives [N, 3, T, H, W]:
    N clips centred on the middles of N equal segments of the video (`spread_clips`).

    Args:
        dataset: a dataset made by `chute convert video` (path or open Dataset); None when
            requests name only files.
        field: its video field.
        num_frames: frames per clip.
        frame_interval: frames between two clip frames.
        size: (H, W) or S of the clip frames (resize to fill, centre crop).
        dtype: "float32" / "float16" (scaled to [-1, 1]) or "uint8".
        layout: "CTHW" ([3, T, H, W] per clip) or "TCHW".
        threads: decoding threads (samples of a batch decode in parallel).
        max_batch: the largest batch it is called with.
        clips: clips per request for requests that do not say (None: one clip, [3, T, H, W]).
        root: the folder file-path requests may read from (symlinks followed: a path that
            leads outside it fails its request); None refuses file paths. Relative, it is
            relative to the working directory, or in a config file (`load_config`) to the
            config's folder.
        backend: the decoder: "cpu" (PyAV), "dali" (DALI: NVDEC on a CUDA device, DALI's
            CPU-only mode on "cpu", which reads VP8, VP9 and MJPEG only; it needs a dataset,
            whose video-dali producer decodes the file requests too), "nvdec" (NVDEC through
            PyNvVideoCodec on a CUDA device, for dataset requests; file requests decode with
            PyAV and are copied; a video NVDEC refuses falls back to PyAV per sample, counted
            and logged as in a Pipeline) or "auto" ("dali" on a CUDA device where DALI imports
            and there is a dataset, else "nvdec" where PyNvVideoCodec imports, else "cpu").
            The choice and its reason are `backend` and `backend_reason`, logged once (logger
            "chute.infer"). A file DALI cannot read fails its request in one line naming
            backend='cpu'; a dataset sample DALI cannot read fails the call alike.
        device: where the clips are delivered, "cpu", "cuda" or "cuda:N" (an inference stage
            passes its replica's device). On CUDA every result is a CUDA tensor: decoded there
            by DALI, or decoded on the CPU (backend "cpu") and copied. A CUDA device on a
            machine without one fails at once in one line.

    Calling it with a list of requests returns one tensor per request; a request that cannot
    be served (a clip that does not decode, a path outside `root`, a file DALI cannot read) is
    an exception in its place (that request fails, the others go on). A sample id out of range
    raises IndexError.
    """

    def __init__(self, dataset=None, field: str = "video", *, num_frames: int = 16,
                 frame_interval: int = 1, size=112, dtype: str = "float32",
                 layout: str = "CTHW", threads: int = 1, max_batch: int = 64,
                 clips: int | None = None, root: str | os.PathLike | None = None,
                 backend: str = "auto", device: str = "cpu"):
        if clips is not None and (isinstance(clips, bool) or not isinstance(clips, int)
                                  or clips < 1):
            raise ValueError(f"VideoClipLoader(clips={clips!r}): clips per request is an "
                             "integer >= 1, or None for one clip without the clips axis")
        if dataset is None and root is None:
            raise ValueError("VideoClipLoader needs a dataset (requests are sample ids), a "
                             "root (requests are video files under it), or both")
        self.device = _check_device(device)
        self.backend, self.backend_reason = _choose(backend, self.device, dataset)
        self.dataset = (open_dataset(dataset) if isinstance(dataset, (str, os.PathLike))
                        else dataset)
        self.field = field
        self.num_frames, self.frame_interval = int(num_frames), int(frame_interval)
        self.size, self.dtype, self.layout = _size(size), dtype, layout
        self.clips = clips
        self.root = None if root is None else Path(root).resolve()
        self.producer = None
        if self.dataset is not None:
            options = {"num_frames": num_frames, "frame_interval": frame_interval,
                       "size": size, "dtype": dtype, "layout": layout, "threads": threads}
            # video-dali on device "cpu": DALI's CPU-only mode; on "cuda:N": NVDEC, written into
            # CUDA memory. The video producer (PyAV) decodes on the CPU whatever the device.
            name = {"dali": "video-dali", "cpu": "video", "nvdec": "video-nvdec"}[self.backend]
            if field not in self.dataset.fields:  # the producer would say what it lacks
                raise FormatError(
                    f"{getattr(self.dataset, 'path', dataset)}: no field {field!r} to load video "
                    f"clips from (its fields: {', '.join(self.dataset.fields)}); give a dataset "
                    "made by `chute convert video`, or the loader's field option naming its "
                    "video field")
            spec = ProducerSpec(name, field, self.dataset, max_batch, device=self.device,
                                options=options, augment="eval")
            self.producer = create_producer(spec)  # checks the options
            if self.backend == "dali":
                self.producer.remedy = _LOADER_REMEDY
            self.frames = np.asarray(self.dataset.column("num_frames"), np.int64)
            self.outputs = self.producer.outputs()  # fixed by its options: read once
        self.pool = ThreadPoolExecutor(max(1, int(threads)), "chute-infer-video") \
            if self.root is not None else None
        self.probes: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        # never a silent choice; "auto" on a CUDA device settling for the CPU is a warning
        fell_back = backend == "auto" and self.device != "cpu" and self.backend == "cpu"
        level = logging.WARNING if fell_back else logging.INFO
        log.log(level, "VideoClipLoader on %s decodes with backend %r: %s", self.device,
                self.backend, self.backend_reason)

    def _parse(self, item) -> tuple[Any, int | None]:
        """(sample id or path, clips or None) of one request."""
        clips = self.clips
        if isinstance(item, dict):
            unknown = sorted(set(item) - {"video", "clips"})
            if "video" not in item or unknown:
                raise ValueError(f"request {item!r}: a dict request is {{'video': sample id or "
                                 "path, 'clips': N}")
            if "clips" in item:
                clips = item["clips"]
                if isinstance(clips, bool) or not isinstance(clips, int) or clips < 1:
                    raise ValueError(f"request {item!r}: clips is an integer >= 1")
            item = item["video"]
        if isinstance(item, (str, os.PathLike)):
            return os.fspath(item), clips
        if isinstance(item, (bool, float)) or not isinstance(item, (int, np.integer)):
            raise ValueError(f"request {item!r}: expected a sample id, a video file path or "
                             "{'video': ..., 'clips': N}")
        return int(item), clips

    def __call__(self, requests: list) -> list:
        parsed: list = []
        for item in requests:
            try:
                parsed.append(self._parse(item))
            except ValueError as exc:
                parsed.append(exc)
        by_id = [k for k, p in enumerate(parsed) if isinstance(p, tuple) and
                 isinstance(p[0], int)]
        ids = [parsed[k][0] for k in by_id]
        if ids and self.producer is None:
            raise IndexError(f"sample ids {ids} name no dataset: this loader was built without "
                             "one (requests must be video file paths)")
        if ids:
            wanted = np.asarray(ids, np.int64)
            bad = (wanted < 0) | (wanted >= len(self.dataset))
            if bad.any():
                raise IndexError(f"sample ids {wanted[bad].tolist()} are out of range for "
                                 f"{self.dataset.path} ({len(self.dataset)} samples)")
        results: list = [p if isinstance(p, Exception) else None for p in parsed]
        if by_id:  # a codec DALI cannot read raises, naming this loader's backend='cpu'
            self._from_dataset([parsed[k] for k in by_id], by_id, results)
        by_path = [k for k, p in enumerate(parsed) if isinstance(p, tuple) and
                   isinstance(p[0], str)]
        if by_path:
            if self.pool is None:
                for k in by_path:
                    results[k] = ValueError(f"request {parsed[k][0]!r}: a video file path needs "
                                            "the loader's root= option (the folder requests "
                                            "may read from)")
            else:
                # pool threads write CUDA results on the caller's stream, as dataset requests
                # do, so a caller under a side stream never reads them before they are written
                stream = (torch.cuda.current_stream(self.device)
                          if self.device.startswith("cuda") else None)
                jobs = {k: self.pool.submit(self._from_file_on, stream, *parsed[k])
                        for k in by_path}
                for k, job in jobs.items():
                    try:
                        results[k] = job.result()
                    except (ValueError, DecodeError, OSError, BackendUnavailableError) as exc:
                        results[k] = exc
        return results

    def _from_dataset(self, items: list, where: list[int], results: list) -> None:
        """Decode the clips of dataset requests `items` (results[where[k]] for item k) as one
        batch of rows: a request of N clips is N rows of the same sample."""
        assert self.producer is not None
        rows: list[int] = []
        starts: list[int] = []
        spans: list[tuple[int, int, int | None]] = []
        for sample, clips in items:
            indices = spread_clips(int(self.frames[sample]), clips or 1, self.num_frames,
                                   self.frame_interval)
            spans.append((len(rows), len(indices), clips))
            rows.extend([sample] * len(indices))
            starts.extend(indices[:, 0].tolist())
        request = BatchRequest(-1, np.asarray(rows, np.int64),
                               {"clip_start": np.asarray(starts, np.int64)})
        shapes = self.producer.shapes(request)
        output = self.outputs[self.field]
        out = {k: np.empty(shapes[k], self.outputs[k].dtype) for k in shapes if k != self.field}
        batch, target = self._result(shapes[self.field], getattr(torch, str(output.dtype)),
                                     output.on_device)
        status = self.producer.fill(request, {**out, self.field: target})
        batch = batch.to(self.device)  # a copy only for a host decode on a CUDA device
        for (first, count, clips), k, (sample, _) in zip(spans, where, items, strict=True):
            failed = np.flatnonzero(status[first:first + count])
            if failed.size:
                which = "its clip" if clips is None else f"clip {int(failed[0])} of {count}"
                results[k] = DecodeError(f"sample {sample} of {self.dataset.path}: {which} "
                                         "does not decode")
            else:
                results[k] = batch[first] if clips is None else batch[first:first + count]

    def _result(self, shape, dtype, on_device: bool) -> tuple[torch.Tensor, Any]:
        """(tensor, what the decoder writes into) for results of `shape`: on the loader's CUDA
        device where the decoder writes there (DALI copies into it on the current stream; a
        CUDA next stage reads it by CUDA IPC), else host memory, shared on a CPU loader so that
        the pipe carries only a handle (docs/inference.md, "Where the loader decodes"); a
        host result of a CUDA loader is copied to its device by the caller (`.to`)."""
        if on_device:
            out = torch.empty(shape, dtype=dtype, device=self.device)
            return out, out
        out = torch.empty(shape, dtype=dtype)
        if self.device == "cpu":
            out.share_memory_()
        return out, out.numpy()

    def _path(self, name: str) -> Path:
        """The file `name` names under the root; ValueError when it leads outside or is none."""
        assert self.root is not None
        try:
            target = (self.root / name).resolve()  # an absolute name replaces the root
        except (OSError, ValueError) as exc:  # a NUL byte, a symlink loop
            raise ValueError(f"request {name!r}: not a usable path ({exc})") from None
        if not target.is_relative_to(self.root):
            raise ValueError(f"request {name!r}: {target} is outside the loader's root "
                             f"{self.root}; requests may name only files inside it")
        if not target.is_file():
            raise ValueError(f"request {name!r}: no file {target} under the loader's root")
        return target

    def _probe(self, path: Path, data: bytes) -> tuple[Any, bool | None]:
        """(`probe_video`'s info, on backend "dali" whether it is a damaged MJPEG stream, else
        None) of the file at `path`, kept per (path, mtime, size): a file is probed and
        demuxed for that check once, not per request."""
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        with self.lock:
            cached = self.probes.get(key)
            if cached is not None:
                self.probes.move_to_end(key)
                return cached
        try:
            probed = probe_video(data)
        except UnreadableVideo as exc:
            raise ValueError(f"request {path.name!r}: {path} {exc}") from None
        damaged = None
        if self.backend == "dali":  # which has a dataset and its video-dali producer
            assert self.producer is not None
            # only a damaged MJPEG stream's clips are checked per request (docs/video.md,
            # "Backends")
            damaged = self.producer.video_damaged(data, probed.pts)
        with self.lock:
            self.probes[key] = probed, damaged
            while len(self.probes) > _PROBES_KEPT:
                self.probes.popitem(last=False)
        return probed, damaged

    def _from_file_on(self, stream, name: str, clips: int | None) -> torch.Tensor:
        """`_from_file` with CUDA work queued on `stream` (None: on the CPU)."""
        if stream is None:
            return self._from_file(name, clips)
        with torch.cuda.stream(stream):
            return self._from_file(name, clips)

    def _from_file(self, name: str, clips: int | None) -> torch.Tensor:
        """The clips of one file request, decoded in one pass over the frames they need."""
        path = self._path(name)
        data = path.read_bytes()
        info, damaged = self._probe(path, data)
        indices = spread_clips(info.num_frames, clips or 1, self.num_frames,
                               self.frame_interval)
        if self.backend == "dali":
            out = self._dali_file(name, path, data, info, indices, damaged)
            return out[0] if clips is None else out
        try:
            rgb = decode_frames(data, info.pts, indices.reshape(-1), info.rotation, self.size,
                                None, keyframes=info.keyframes)
        except DecodeError as exc:
            raise DecodeError(f"request {name!r}: {path} does not decode ({exc})") from None
        rgb = rgb.reshape(len(indices), self.num_frames, *rgb.shape[1:])
        first = clip_to_output(rgb[0], self.dtype, self.layout)
        dtype = getattr(torch, str(first.dtype))
        out, view = self._result((len(indices), *first.shape), dtype, False)
        view[0] = first
        for k in range(1, len(indices)):
            view[k] = clip_to_output(rgb[k], self.dtype, self.layout)
        out = out.to(self.device)  # a copy on a CUDA device, else `out` itself
        return out[0] if clips is None else out

    def _dali_file(self, name: str, path: Path, data: bytes, info, indices: np.ndarray,
                   damaged: bool | None) -> torch.Tensor:
        """The clips `indices` of a file request decoded by the dataset's video-dali producer
        (docs/inference.md, "Where the loader decodes"): [N, *clip] on the loader's device."""
        h, w = self.size or (info.height, info.width)
        t = self.num_frames
        shape = (len(indices), 3, t, h, w) if self.layout == "CTHW" else \
            (len(indices), t, 3, h, w)
        output = self.outputs[self.field]
        out, target = self._result(shape, getattr(torch, str(output.dtype)), output.on_device)
        assert self.producer is not None  # backend "dali" has a dataset and its producer
        self.producer.decode_video(data, indices, info.rotation, (info.height, info.width),
                                   target, pts=info.pts, name=f"request {name!r}: {path}",
                                   damaged=damaged)
        return out.to(self.device)  # a copy only for DALI's CPU mode on a CUDA device

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        if self.pool is not None:
            self.pool.shutdown()
