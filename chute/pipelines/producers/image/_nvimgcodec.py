"""Backend `nvimgcodec`: nvImageCodec decodes each sample's crop window directly (batched ROI
decode, no DALI graph), then the shared resample (docs/design.md, "Resize definition").

- device cuda: nvImageCodec decodes on the GPU, on a decode worker's own stream; chute's fused
  CUDA kernel (`chute.kernels.resize_normalize`) resizes, flips and normalizes into the
  Pipeline's tensor on the caller's current stream, after waiting on the decode's event. The
  worker's images (and any it copied to the GPU) are kept until a host wait on the event
  recorded after that kernel: only then are they decoded into again or dropped.
- device cpu (the CPU twin, which the tests run): nvImageCodec's CPU-only backend decodes, and
  the CPU fallback's resample (`chute.fallbacks._resample.resample_into`) does the rest.

Multi-crop views (docs/views.md): each sample is decoded once, in the one window that holds every
view's resample margin (`chute.kernels.union_windows`), and on a GPU every view of the batch is
resampled by one launch of the views kernel (`chute.kernels.resize_normalize_views`).

nvJPEG before 13.2 refuses ROI decodes of chroma-subsampled JPEGs on the GPU (its fancy
upsampling can be wrong on a window's edge), and nvImageCodec then decodes them with
libjpeg-turbo on the CPU, silently (the first GPU run found it: docs/images.md, "Backends"). So
on a GPU the backend first asks the GPU decoders alone to decode a small 4:2:0 JPEG, whole and
by a window: where they refuse the window, subsampled JPEGs (their frame header says which) are
decoded whole on the GPU and the kernel reads the window from the whole image; where they
decode nothing, the backend cannot run (backend option `roi_decode`: "auto", True, False).

Several batches are in flight (docs/pipeline.md, "Batches in flight"): K decode workers
(backend option `decoders`), each with its own configured Decoder (`_nvimgcodec_config.py`),
CUDA stream, pinned staging for the encoded bytes and decoded images reused batch after batch
(`decode(images=)`), prepare and decode the next batches while the Pipeline's thread resamples
the current one on its stream. nvJPEG's hardware decoder writes its outputs when called, not
in stream order, so a worker reuses its images only after a host wait on the event recorded
after the kernel that read them. Which decoder took each image is counted in the Pipeline's
stage timers ("FIELD/decoded:gpu", ":cpu", ":whole", ":refused", ":failed").

Windows carry the resample's margin (`chute.kernels.roi_windows`), EXIF orientation is ignored,
and samples nvImageCodec cannot decode get a non-zero status (the Pipeline substitutes them), as
do samples whose header claims more than `max_pixels` (backend option) or another size than the
height/width columns: those never reach the decoder.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from chute._device import require_cuda
from chute._normalization import scaled_mean_std
from chute.errors import BackendUnavailableError
from chute.kernels import roi_windows, union_windows
from chute.pipelines._common._stages import StageTimes
from chute.pipelines.producers._contract import ImageSpec
from chute.pipelines.producers._inflight import DecodeWorkers, InFlightEpoch, free_event
from chute.pipelines.producers.image._header import header_checks
from chute.pipelines.producers.image._nvimgcodec_config import (
    NvImgCodecOptions,
    candidate_grid,
    cpu_only_decoder,
    make_decoder,
    size_hint,
)
from chute.pipelines.producers.image._producer import ImageProducerBase

__all__ = ["create", "candidates", "NvImgCodecBackend", "import_nvimgcodec"]

_UNDECODABLE = 1  # status of a sample nvImageCodec returns no image for (DecodeStatus.CORRUPT)
_GPU_REFUSED = 6  # DecodeStatus.GPU_REFUSED: no GPU decoder took it and cpu_fallback is off

_log = logging.getLogger(__name__)


def import_nvimgcodec():
    """`nvidia.nvimgcodec`, or a BackendUnavailableError naming the package to install."""
    try:
        from nvidia import nvimgcodec
    except ImportError as err:
        raise BackendUnavailableError(
            f"backend 'nvimgcodec' needs nvImageCodec, which cannot be imported here ({err}). "
            "Install it with `pip install chute[gpu]` (`chute[gpu-cu13]` for a CUDA 13 torch), "
            "or use backend='cpu'."
        ) from err
    return nvimgcodec


@dataclass
class _Worker:
    """What one decode worker owns: kept for the producer's life, reused batch after batch."""

    decoder: Any
    stream: Any = None  # torch.cuda.Stream (GPU) or None (CPU twin)
    fallback: Any = None  # the CPU-only Decoder of cpu_fallback, made at first need
    pool: list = field(default_factory=list)  # nvimgcodec Images reused by decode(images=)
    scratch: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint8))
    decoded: Any = None  # torch.cuda.Event: this worker's decode is done on its stream
    consumed: Any = None  # torch.cuda.Event: the kernel that read the pool is done
    consumed_recorded: bool = False
    held: list = field(default_factory=list)  # cpu_fallback images copied to the GPU
    free: threading.Event = field(default_factory=free_event)


@dataclass
class _Decoded:
    """One batch decoded by a worker, waiting for its resample."""

    worker: _Worker
    images: list  # per row: an nvimgcodec Image or None
    inner: np.ndarray  # [B, V, 4] boxes inside each decoded window
    flips: np.ndarray  # [B, V]
    status: np.ndarray  # uint8 [B]


class NvImgCodecBackend(ImageProducerBase):
    """K decode workers keep the next batches decoding; `read` resamples its batch."""

    name = "nvimgcodec"

    def __init__(self, spec: ImageSpec, device_id: int | None):
        options = NvImgCodecOptions.from_dict(spec.options)
        self.config = options.decoder
        super().__init__(spec)
        self.device_id = device_id
        self.output_on_device = device_id is not None
        self.stages = StageTimes()  # the Pipeline gives its own (pipelines/_common/_stages.py)
        codec = import_nvimgcodec()
        self._codec = codec
        self._params = codec.DecodeParams(apply_exif_orientation=False,
                                          color_spec=codec.ColorSpec.SRGB)
        self.whole, self.roi_reason = self._choose_whole(options.roi_decode)
        _log.info("nvimgcodec on %s: %s; %s", spec.device, self.roi_reason, self.config)
        from chute.fallbacks import max_image_pixels

        self._max_pixels = max_image_pixels(options.max_pixels)
        self._sizes = self.size_table()
        self._size_hint = size_hint(self._sizes)
        self._placeholder: Any = None  # the 1x1 source failed samples read (views on a GPU)
        if device_id is None:
            mean255, std255 = scaled_mean_std(spec.mean, spec.std)
            self._norm = (mean255, std255)
        # substitutes (fill) decode on the Pipeline's thread with a worker state of their own
        self._sync, self._sync_pid = self._new_worker(), os.getpid()
        self.workers = DecodeWorkers(self.config.decoders, self._new_worker, self.decode_batch,
                                     name=f"chute-nvimgcodec-{self.field}")

    def _new_worker(self) -> _Worker:
        decoder = make_decoder(self._codec, self.config, self.device_id, self.spec.batch_size,
                               self._size_hint)
        worker = _Worker(decoder)
        if self.device_id is not None:
            worker.stream, worker.decoded, worker.consumed = _cuda_resources(self.device_id)
            worker.scratch = _pinned(0)
        return worker

    def _choose_whole(self, option: object) -> tuple[str, str]:
        """(which images are decoded whole: "none", "subsampled" or "all", why) for backend
        option `roi_decode`."""
        if option is True or option is False:
            return ("none" if option else "all"), f"roi_decode={option} (backend option)"
        if self.device_id is None:  # libjpeg-turbo's ROI decode equals its whole decode
            return "none", "crop windows decoded on the CPU"
        if gpu_jpeg_decoding(self.device_id) == "windows":
            return "none", "the GPU decoders decode crop windows of 4:2:0 JPEGs here"
        return "subsampled", (
            "the GPU decoders refuse crop windows of subsampled JPEGs here (nvJPEG before 13.2), "
            "which nvImageCodec would decode on the CPU: those are decoded whole on the GPU, "
            "the others by their windows (nvJPEG >= 13.2 decodes every window: pip install "
            "'nvidia-nvjpeg>=13.2' with a CUDA 13 torch)")

    def open_epoch(self, plan, first_iteration: int) -> InFlightEpoch:
        return InFlightEpoch(self, plan, first_iteration, self.workers, len(self.workers))

    def fill(self, request, out: dict) -> np.ndarray:
        if self._sync_pid != os.getpid():  # a forked child: the parent may have been using it
            self._sync, self._sync_pid = self._new_worker(), os.getpid()
        return self.complete(self.decode_batch(self._sync, request), request, out)

    # ---- on a decode worker ------------------------------------------------------------------

    def decode_batch(self, worker: _Worker, request) -> _Decoded:
        """Prepare (headers, windows, bytes into staging) and decode one batch on `worker`,
        once the batch that last used its images is done with them."""
        worker.free.wait()
        worker.free.clear()
        try:
            if worker.consumed_recorded:  # the hardware decoder writes at call time
                worker.consumed.synchronize()
                worker.consumed_recorded = False
            worker.held.clear()  # what the last batch's kernel read is no longer read
            with self.stages.measure(f"{self.field}/prepare"):
                prepared = self._prepare(worker, request)
            with self.stages.measure(f"{self.field}/decode"):
                return self._decode(worker, *prepared)
        except BaseException:
            self._release(worker, None)
            raise

    def _release(self, worker: _Worker, stream) -> None:
        """Give a worker's images back after a batch: on a GPU the `consumed` event, recorded
        on `stream` (the kernel's) or else the worker's own (a decode that may still write),
        is host-waited before they are decoded into again."""
        try:
            if worker.consumed is not None:
                worker.consumed.record(worker.stream if stream is None else stream)
                worker.consumed_recorded = True
        finally:
            worker.free.set()

    def _prepare(self, worker: _Worker, request):
        ids = np.asarray(request.ids, dtype=np.int64)
        if self.spec.views:  # one decode window per sample serves every view
            boxes = request.params[f"{self.field}.view_boxes"]
            flips = np.asarray(request.params[f"{self.field}.view_flips"], dtype=bool)
            windows, inner = union_windows(boxes, self._sizes[ids],
                                           [crop.size for crop in self.spec.views])
        else:
            flips = np.asarray(request.params["flips"], dtype=bool)[:, None]
            windows, inner = roi_windows(request.params["boxes"], self._sizes[ids],
                                         self.spec.size)
            inner = inner[:, None]
        data, offsets = self.spec.dataset.gather(ids, self.field, out=worker.scratch)
        if not np.shares_memory(data, worker.scratch):
            worker.scratch = self._grown_scratch(data.nbytes)
        encoded = [data[offsets[k]:offsets[k + 1]] for k in range(len(ids))]
        # headers first: a bomb or a size the columns do not state never reaches the decoder
        refused, subsampled = header_checks(encoded, self._sizes[ids], self._max_pixels)
        whole = subsampled if self.whole == "subsampled" else np.full(len(ids),
                                                                      self.whole == "all")
        if whole.any():  # the window is the whole image, the boxes move into it
            inner = np.array(inner, dtype=np.float32)
            windows = np.array(windows)
            inner[whole, :, 0] += windows[whole, None, 0]
            inner[whole, :, 1] += windows[whole, None, 1]
            windows[whole, :2] = 0
            windows[whole, 2:] = self._sizes[ids][whole]
        codec = self._codec
        streams = []
        for k in np.flatnonzero(refused == 0).tolist():
            top, left, height, width = windows[k].tolist()
            stream = codec.CodeStream(encoded[k])
            if not whole[k]:
                stream = stream.get_sub_code_stream(
                    region=codec.Region(top, left, top + height, left + width))
            streams.append((k, stream))
        self.stages.count(f"{self.field}/decoded:whole", int(whole[refused == 0].sum()))
        return streams, windows, inner, flips, refused

    def _grown_scratch(self, nbytes: int) -> np.ndarray:
        size = int(nbytes * 1.25) + 4096  # headroom: slightly larger batches do not regrow
        return np.empty(size, dtype=np.uint8) if self.device_id is None else _pinned(size)

    def _decode(self, worker: _Worker, streams, windows, inner, flips, refused) -> _Decoded:
        n = len(refused)
        images: list = [None] * n
        status = refused.astype(np.uint8, copy=True)
        self.stages.count(f"{self.field}/decoded:refused", int((refused != 0).sum()))
        if streams:
            srcs = [s for _, s in streams]
            reuse = worker.pool[:len(srcs)] if len(worker.pool) >= len(srcs) else None
            cuda_stream = 0 if worker.stream is None else worker.stream.cuda_stream
            got = worker.decoder.decode(srcs, images=reuse, params=self._params,
                                        cuda_stream=cuda_stream)
            if reuse is None:  # the first (largest so far) batch: its images become the pool
                worker.pool = [img for img in got if img is not None] + worker.pool
            missing = []
            for (k, _), img in zip(streams, got, strict=True):
                if img is not None and img.shape[:2] == tuple(windows[k, 2:].tolist()):
                    images[k] = img
                else:
                    missing.append(k)
            kind = "gpu" if self.device_id is not None else "cpu"
            self.stages.count(f"{self.field}/decoded:{kind}", len(streams) - len(missing))
            if missing:
                self._decode_missing(worker, dict(streams), missing, windows, images, status)
            if worker.decoded is not None:
                worker.decoded.record(worker.stream)
        return _Decoded(worker, images, inner, flips, status)

    def _decode_missing(self, worker, streams, missing, windows, images, status) -> None:
        """Images the worker's decoders returned none for: on a GPU with cpu_fallback, decoded
        by nvImageCodec's CPU-only decoder (counted), else a failed status."""
        if self.device_id is None or not self.config.cpu_fallback:
            status[missing] = _UNDECODABLE if self.device_id is None else _GPU_REFUSED
            self.stages.count(f"{self.field}/decoded:failed", len(missing))
            return
        if worker.fallback is None:
            worker.fallback = cpu_only_decoder(self._codec, self.config.num_cpu_threads)
        got = worker.fallback.decode([streams[k] for k in missing], params=self._params)
        done = 0
        for k, img in zip(missing, got, strict=True):
            if img is not None and img.shape[:2] == tuple(windows[k, 2:].tolist()):
                images[k] = img.cuda(synchronize=False, device_id=self.device_id,
                                     cuda_stream=worker.stream.cuda_stream)
                # kept until the kernel that reads it is known done (its buffer is detached
                # from the stream: dropped now, its memory could be reused under the kernel)
                worker.held += [img, images[k]]
                done += 1
            else:
                status[k] = _UNDECODABLE
        self.stages.count(f"{self.field}/decoded:cpu", done)
        self.stages.count(f"{self.field}/decoded:failed", len(missing) - done)

    # ---- on the Pipeline's thread --------------------------------------------------------------

    def complete(self, decoded: _Decoded, request, out: dict) -> np.ndarray:
        """Resample a decoded batch into `out` (on the caller's current stream on a GPU), then
        give its worker's images back."""
        worker = decoded.worker
        if self.spec.views:
            targets = [out[key] for key in self.view_shapes(1)]
        else:
            targets = [out[self.field]]
        stream = None  # the kernel's, once it waits for the decode
        try:
            with self.stages.measure(f"{self.field}/resample"):
                if self.device_id is None:
                    self._resample_on_cpu(decoded.images, decoded.inner, decoded.flips, targets)
                else:
                    caller = _current_stream(targets[0])
                    caller.wait_event(worker.decoded)
                    stream = caller  # from here on it follows the decode: record after it
                    if self.spec.views:
                        self._views_on_gpu(decoded.images, decoded.inner, decoded.flips,
                                           targets, decoded.status, stream)
                    else:
                        self._resample_on_gpu(decoded.images, decoded.inner[:, 0],
                                              decoded.flips[:, 0], targets[0], decoded.status,
                                              stream)
        finally:
            self._release(worker, stream)
        return decoded.status

    def discard(self, decoded: _Decoded) -> None:
        """A decoded batch nobody resamples: its worker's images are free again once its
        decode, which may still write them on the worker's stream, is done."""
        self._release(decoded.worker, None)

    def _resample_on_cpu(self, images, inner, flips, targets) -> None:
        """inner [B, V, 4], flips [B, V]: view v of sample b into targets[v] (V = 1 without
        views)."""
        from chute.fallbacks import (
            KIND_FLOAT16,
            KIND_FLOAT32,
            KIND_UINT8,
            resample_into,
        )

        kind = {"uint8": KIND_UINT8, "float16": KIND_FLOAT16, "float32": KIND_FLOAT32}[
            self.spec.dtype]
        dests = [t.view(np.uint16) if kind == KIND_FLOAT16 else t for t in targets]
        mean255, std255 = self._norm
        for b, img in enumerate(images):
            if img is None:
                continue
            pixels = np.ascontiguousarray(np.asarray(img.cpu()))
            if pixels.ndim != 3 or pixels.shape[2] != 3:
                raise BackendUnavailableError(
                    f"nvImageCodec returned a {pixels.shape} image for an RGB decode; "
                    "use backend='cpu' and report this")
            h, w = pixels.shape[:2]
            row = np.empty(w * 3, dtype=np.float32)
            for v, dest in enumerate(dests):
                y0, x0, bh, bw = (float(x) for x in inner[b, v])
                resample_into(pixels.reshape(-1), h, w, y0, x0, bh, bw, bool(flips[b, v]), dest,
                              b, kind, self.spec.layout == "NCHW", mean255, std255, row)

    def _resample_on_gpu(self, images, inner, flips, target, status, stream) -> None:
        import torch

        from chute.kernels import resize_normalize

        good = np.flatnonzero(status == 0)
        if good.size == 0:
            return
        kwargs: dict[str, Any] = dict(layout=self.spec.layout, mean=self.spec.mean,
                                      std=self.spec.std, stream=stream)
        if good.size == len(images):
            resize_normalize(images, inner, flips, target, **kwargs)
            return
        # Undecodable samples are replaced by the Pipeline: resample only the good ones.
        rows = torch.as_tensor(good, device=target.device)
        part = torch.empty((good.size, *target.shape[1:]), dtype=target.dtype,
                           device=target.device)
        resize_normalize([images[k] for k in good], inner[good], flips[good], part, **kwargs)
        with torch.cuda.stream(stream):
            target.index_copy_(0, rows, part)

    def _views_on_gpu(self, images, inner, flips, targets, status, stream) -> None:
        """Every view of the batch in one launch of the views kernel. A sample without an image
        reads a 1x1 placeholder instead (one launch whatever fails); the Pipeline replaces its
        rows in every view (status non-zero)."""
        import torch

        from chute.kernels import resize_normalize_views

        if not (status == 0).any():
            return
        inner = np.array(inner, dtype=np.float32)  # a copy: failed rows are rewritten
        sources = list(images)
        for k in np.flatnonzero(status != 0).tolist():
            if self._placeholder is None:
                self._placeholder = torch.zeros((1, 1, 3), dtype=torch.uint8,
                                                device=targets[0].device)
            sources[k] = self._placeholder
            inner[k] = (0.0, 0.0, 1.0, 1.0)
        resize_normalize_views(sources, inner, flips, targets, layout=self.spec.layout,
                               mean=self.spec.mean, std=self.spec.std, stream=stream)

    def close(self) -> None:
        self.workers.close()


@cache
def gpu_jpeg_decoding(device_id: int) -> str:
    """How nvImageCodec's GPU decoders alone decode a 4:2:0 JPEG on CUDA device `device_id`:
    "windows" (crop windows too) or "whole" (whole images only); BackendUnavailableError where
    they decode nothing (once per process and device: two small decodes).

    Args:
        device_id: the CUDA device.
    """
    import io

    from PIL import Image

    codec = import_nvimgcodec()
    # a 64x64 4:2:0 baseline JPEG (Pillow's default subsampling at quality 90)
    buf = io.BytesIO()
    ramp = np.linspace(0, 255, 64 * 64 * 3).astype(np.uint8).reshape(64, 64, 3)
    Image.fromarray(ramp).save(buf, format="JPEG", quality=90, subsampling="4:2:0")
    whole = codec.CodeStream(buf.getvalue())
    window = codec.CodeStream(buf.getvalue()).get_sub_code_stream(
        region=codec.Region(8, 8, 40, 40))
    params = codec.DecodeParams(apply_exif_orientation=False, color_spec=codec.ColorSpec.SRGB)
    try:
        decoder = codec.Decoder(device_id=device_id, backends=[
            codec.Backend(codec.GPU_ONLY), codec.Backend(codec.HW_GPU_ONLY),
            codec.Backend(codec.HYBRID_CPU_GPU)])
        got_whole, got_window = decoder.decode([whole, window], params=params)
    except RuntimeError as err:
        got_whole, got_window, why = None, None, f" ({str(err).splitlines()[0][:120]})"
    else:
        why = ""
    if got_whole is None or tuple(got_whole.shape[:2]) != (64, 64):
        raise BackendUnavailableError(
            f"backend 'nvimgcodec' on cuda:{device_id}: nvImageCodec's GPU decoders decode no "
            f"JPEG here{why}, and it would decode every image on the CPU; install nvJPEG "
            "(pip install 'nvidia-nvjpeg>=13.2' with a CUDA 13 torch, nvidia-nvjpeg-cu12 with "
            "CUDA 12) or use backend='cpu'")
    ok = got_window is not None and tuple(got_window.shape[:2]) == (32, 32)
    return "windows" if ok else "whole"


def _cuda_resources(device_id: int):
    """A decode worker's (stream, decoded event, consumed event) on CUDA device `device_id`."""
    import torch

    device = torch.device("cuda", device_id)
    return torch.cuda.Stream(device), torch.cuda.Event(), torch.cuda.Event()


def _pinned(nbytes: int) -> np.ndarray:
    """A pinned host buffer: the decoders copy encoded bytes from it to the GPU asynchronously
    (docs/images.md, "The nvimgcodec decoder")."""
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


def _current_stream(target):
    """The caller's current CUDA stream on the device of `target`, the output tensor."""
    import torch

    if not (isinstance(target, torch.Tensor) and target.is_cuda):
        raise TypeError(f"backend 'nvimgcodec' on a GPU writes into a CUDA tensor, not a "
                        f"{type(target).__name__}; pass the Pipeline's device buffer")
    return torch.cuda.current_stream(target.device)


def create(spec: ImageSpec) -> NvImgCodecBackend:
    """The `nvimgcodec` backend for a BackendSpec (fails fast when it cannot run)."""
    device_id = None
    if spec.device.startswith("cuda"):
        require_cuda("backend 'nvimgcodec'", spec.device)
        device_id = int(spec.device.partition(":")[2] or 0)
    return NvImgCodecBackend(spec, device_id)


def candidates(device: str) -> list:
    """The decoder configurations of `candidate_grid` next to `dali` and `dali-native` on a GPU
    (unavailable, with the reason, where they cannot run)."""
    return nvimgcodec_candidates(device)


def nvimgcodec_candidates(device: str, *, cuda_devices: int | None = None) -> list:
    """The `nvimgcodec` candidates for `device`: one per configuration of `candidate_grid`.

    Args:
        device: where batches go; it needs a CUDA device (and CuPy for its kernel).
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    from chute._candidate import Candidate
    from chute.pipelines.producers._candidates import (
        BACKEND_ORDER,
        FIDELITY_EXACT,
        cuda_unavailable_reason,
    )
    from chute.pipelines.producers.image._dali_source import cupy_import_error

    # nvImageCodec needs a CUDA device, CuPy and itself -- not DALI (a GPU machine may have
    # nvImageCodec without DALI: docs/images.md, "Backends")
    reason = cuda_unavailable_reason(device, cuda_devices,
                                     "the nvimgcodec candidate decodes on a CUDA device")
    if reason is None:
        reason = cupy_import_error()
    if reason is None:
        try:
            import_nvimgcodec()
        except BackendUnavailableError as err:
            reason = str(err)
    grid = candidate_grid()
    return [Candidate(name=_candidate_name(config), backend="nvimgcodec",
                      params=config.as_params(), available=reason is None,
                      reason=reason or "", cost=(BACKEND_ORDER.index("nvimgcodec"), i, 0),
                      priority=1 if i == 1 else 2, fidelity=FIDELITY_EXACT)
            for i, config in enumerate(grid)]


def _candidate_name(config) -> str:
    """e.g. "nvimgcodec decoders=2 hw,cuda,hybrid hw_load=0.65"."""
    load = "" if config.hw_load is None else f" hw_load={config.hw_load:g}"
    return f"nvimgcodec decoders={config.decoders} {','.join(config.gpu_backends)}{load}"
