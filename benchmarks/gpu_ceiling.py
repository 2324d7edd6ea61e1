"""The GPU ceiling run of issue 36, item 6: one script, under 8 minutes on a lent GPU machine,
that measures how far chute's GPU image path is from the decoders' own ceiling.

    ./dev.sh gpu-bundle                                        # here, with network
    CHUTE_GPU_BUNDLE=.gpu-bundle python3 benchmarks/gpu_ceiling.py [--out DIR] [--jpegs DIR]
    CHUTE_GPU_DRY_RUN=1 python3 benchmarks/gpu_ceiling.py      # no GPU: the CPU twins, tiny

Steps (each with its own time budget; a row cut by it says so):
A. environment: physical cores vs logical CPUs, the cpu backend's ROI decoder, the GPU, its
   JPEG engines and which NVML engine counters the driver answers, nvImageCodec and nvJPEG.
B. 4,096 ImageNet-like JPEGs made from the bundled ones (short side mostly 256-512, a tenth up
   to 2,048; quality 75-95; 4:2:0 and 4:4:4 mixed), and the same images all 4:2:0, written as
   two chute datasets (seeded; a process pool).
C. decode-only ceilings: nvImageCodec's GPU decoders alone ("hw", "cuda", "hybrid") and mixed,
   whole images vs RandomResizedCrop windows, batch 64 and 256, 1/2/4 decode threads each with
   its own Decoder (`make_decoder`); torchvision's batched `decode_jpeg(device="cuda")`.
D. the ordering hazard: nvJPEG's hardware decoder writes reused images when called, not in
   stream order; a slow consumer on another stream reads batch A while batch B is decoded into
   the same images, stream-ordered only (the hazard) or after a host wait (chute's path).
E. chute end to end (nvimgcodec, RRC 224, float16 NCHW, cuda:0), batch 64 and 256, K = 1, 2, 4
   decode workers, a full warm-up epoch then up to 200 timed batches, with the stage timers;
   DINO views (2 x 224 + 6 x 96); the references: the cpu backend on every core and
   torchvision's GPU decode + transforms.v2.
F. the cpu backend at 1/2/4/8/16 threads (up to the logical CPUs), ROI decoder on and off.
G. training: ResNet-50, bf16 autocast, channels_last, batch 256, SGD, fed by chute nvimgcodec,
   chute cpu, torchvision decode + v2, and by synthetic tensors already on the GPU.
V. video (issue 40; benchmarks/gpu_video.py, at most 3 minutes): the nvdec backend's clips
   against the cpu backend's references from the bundle, clips/s of nvdec vs cpu for 16 x 4 @
   256 with NVDEC %, and the inference loader on nvdec. `--video-only` runs A and V alone.
Then the issue's goals, as ratios of the rows (measured, target, met or not).

Every row: img/s, CPU core-seconds per 1,000 images (the process's CPU time), mean SM % and
JPEG-engine % (chute.autotune.GpuSampler). It writes gpu_ceiling.md (the table) and
gpu_ceiling.json (rows with stage timers, goals, environment) into --out (default $OUT, else a
temporary folder), rewritten after every row, and prints the table. The bundle
(CHUTE_GPU_BUNDLE, default .gpu-bundle/) supplies nvImageCodec, nvJPEG, libturbojpeg, the JPEGs
and the prebuilt ROI decoder with its libjpeg.

The dry run (CHUTE_GPU_DRY_RUN=1 or --dry-run; also where there is no CUDA device) runs every
step on the CPU as far as it can, tiny (64 images, a few batches, a small model at 32 px):
nvImageCodec's CPU-only decoder stands in for the GPU decoders, and rows that need a GPU say so.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NEEDS_GPU = "needs a GPU"

# seconds per step on the GPU machine (the whole run stays under 8 minutes); the dry run's
BUDGETS = {"A": 15, "B": 40, "C": 80, "D": 15, "E": 135, "F": 55, "G": 75, "V": 180}
DRY_BUDGETS = {"A": 10, "B": 15, "C": 15, "D": 5, "E": 20, "F": 10, "G": 15, "V": 60}
TOTAL = 470  # the watchdog's limit: a step that hangs past its budget ends the run here
VIDEO_TOTAL = 210  # the same with --video-only (steps A and V)


@dataclass
class Sizes:
    """How big the run is: the GPU machine's, or the dry run's."""

    images: int  # per dataset (B)
    short: tuple[int, int]  # the usual short side
    large: tuple[int, int]  # the short side of a tenth of the images
    batches: tuple[int, int]  # "batch 64 and 256"
    crop: int  # RRC output
    timed: int  # E: timed batches after the warm-up epoch
    seconds: float  # C, F: seconds per row; E and G get a few times that
    train_batch: int
    train_steps: int
    train_size: int


GPU_SIZES = Sizes(4096, (256, 512), (513, 2048), (64, 256), 224, 200, 1.0, 256, 30, 224)
DRY_SIZES = Sizes(64, (48, 96), (97, 192), (8, 16), 32, 3, 0.2, 8, 2, 32)


# ---- the run: rows, budgets, output ------------------------------------------------------------

class Run:
    """Rows as they are measured, the current step's deadline, and the output files."""

    def __init__(self, out: Path, dry: bool, gpu: bool):
        self.out, self.dry, self.gpu = out, dry, gpu
        self.device = "cuda:0" if gpu else "cpu"
        self.rows: list[dict] = []
        self.goals: list[dict] = []
        self.env: dict = {}
        self.deadline = float("inf")
        self.step = "-"
        self.planned = self.added = 0  # rows the step plans, rows it has added
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def add(self, name: str, status: str, **values) -> dict:
        row = {"step": self.step, "name": name, "status": status, "img_s": None,
               "cpu_s_per_1000": None, "sm_pct": None, "jpeg_pct": None, "detail": "",
               **values}
        with self.lock:
            self.rows.append(row)
            self.added += 1
            self.write()
        print(f"[{self.step}] {name}: {status} {_cell(row['img_s'], '.0f')} img/s "
              f"{row['detail']}", file=sys.stderr, flush=True)
        return row

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def cap(self, seconds: float) -> float:
        """`seconds`, or what the step has left if that is less."""
        return max(0.0, min(seconds, self.left()))

    def plan(self, rows: int) -> None:
        """The step will add about `rows` rows: `share` divides its time among them."""
        self.planned, self.added = rows, 0

    def share(self, seconds: float) -> float:
        """Timed seconds for the next row: `seconds`, or less so that the rows still to come
        get their share of the step's time (70% of it: set-up and warm-up take the rest)."""
        rows = max(1, self.planned - self.added)
        return max(0.05, min(seconds, 0.7 * self.left() / rows))

    @contextlib.contextmanager
    def stage(self, letter: str, title: str, budgets: dict):
        """Step `letter`: its budget starts; an exception becomes a FAILED row of the step."""
        self.step = letter
        self.deadline = time.monotonic() + budgets[letter]
        print(f"[{letter}] {title} (budget {budgets[letter]} s)", file=sys.stderr, flush=True)
        try:
            yield
        except Exception as exc:
            traceback.print_exc()
            self.add(title, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")

    def table(self) -> str:
        lines = ["| step | row | status | img/s | CPU core-s / 1k img | SM % | JPEG % | detail |",
                 "|---|---|---|---:|---:|---:|---:|---|"]
        for r in self.rows:
            cells = [r["step"], r["name"], r["status"], _cell(r["img_s"], ".0f"),
                     _cell(r["cpu_s_per_1000"], ".2f"), _cell(r["sm_pct"], ".0f"),
                     _cell(r["jpeg_pct"], ".0f"), r["detail"]]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines)

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_ceiling.md").write_text(self.table() + "\n")
        doc = {"dry_run": self.dry, "device": self.device,
               "seconds": round(time.monotonic() - self.started, 1), "environment": self.env,
               "rows": self.rows, "goals": self.goals}
        (self.out / "gpu_ceiling.json").write_text(json.dumps(doc, indent=1, default=str))


def _cell(value, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:140]


def skip_rows(run: Run, names: list[str], why: str = NEEDS_GPU) -> None:
    for name in names:
        run.add(name, why)


# ---- measurement -----------------------------------------------------------------------------

def timed(run: Run, next_batch: Callable[[], int], *, warmup: int, count: int | None,
          seconds: float, sync: Callable[[], None]) -> dict:
    """Call `next_batch` (it returns the images it delivered) `warmup` times, then up to `count`
    times (None: no limit) or for `seconds`: img/s, CPU core-seconds per 1,000 images, SM and
    JPEG-engine %; status "cut at N batches" where `seconds` ended it before `count`."""
    from chute.autotune import GpuSampler

    for _ in range(warmup):
        next_batch()
    sync()
    with GpuSampler(run.device) as sampler:
        images = batches = 0
        start, cpu = time.perf_counter(), time.process_time()
        limit = count if count is not None else 1 << 62
        while batches < limit and (batches == 0 or time.perf_counter() - start < seconds):
            images += next_batch()
            batches += 1
        sync()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    status = "ok" if count is None or batches >= count else f"cut at {batches} batches"
    return {"status": status, "img_s": images / wall if wall > 0 else None,
            "cpu_s_per_1000": 1000 * cpu / max(images, 1), "sm_pct": sampler.mean,
            "jpeg_pct": sampler.engine_mean("jpeg"), "batches": batches, "images": images,
            "seconds": round(wall, 3)}


def synchronizer(run: Run) -> Callable[[], None]:
    if not run.gpu:
        return lambda: None
    import torch

    return torch.cuda.synchronize


def missing(*modules: str) -> str | None:
    """bench_gpu.py's: None when every module imports, else "not installed (...)" or "cannot
    load ...": a row's status."""
    from bench_gpu import missing as first_missing

    return first_missing(*modules)


# ---- A. environment --------------------------------------------------------------------------

def bundle_setup(bundle: Path) -> list[str]:
    """Put the bundle's pieces where chute finds them; what was done, in words."""
    done = []
    site = bundle / "site"
    if site.is_dir():
        sys.path.insert(0, str(site))
        done.append(f"{site} on sys.path")
    turbo = bundle / "turbojpeg/usr/lib/x86_64-linux-gnu/libturbojpeg.so.0"
    if not os.environ.get("CHUTE_TURBOJPEG") and turbo.exists():
        os.environ["CHUTE_TURBOJPEG"] = str(turbo)
        done.append("CHUTE_TURBOJPEG from the bundle")
    # the prebuilt ROI decoder needs libjpeg.so.62: the system's, else the bundle's, loaded
    # first (global symbols) so that the shim's dependency resolves to it
    shims = sorted((bundle / "native").glob("roi_jpeg-*.so"))
    if shims:
        try:
            ctypes.CDLL("libjpeg.so.62", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            libjpeg = next(iter(sorted((bundle / "libjpeg").rglob("libjpeg.so.62*"))), None)
            if libjpeg is not None:
                ctypes.CDLL(str(libjpeg), mode=ctypes.RTLD_GLOBAL)
                done.append(f"{libjpeg.name} from the bundle")
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from chute._cache_dir import cache_dir

        target = cache_dir() / "native"
        for shim in shims:  # keyed by its source: a stale one is simply never looked up
            if not (target / shim.name).exists():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(shim, target / shim.name)
                done.append(f"prebuilt {shim.name} into {target}")
    return done


def step_environment(run: Run, notes: list[str]) -> None:
    import torch

    from chute.fallbacks import roi_decoder_status
    from chute.pipelines import physical_cores

    cpus = sorted(os.sched_getaffinity(0))
    physical = physical_cores(cpus)
    run.env.update(logical_cpus=len(cpus), physical_cores=physical, bundle=notes)
    run.add("CPUs", "ok", detail=f"{physical} physical cores, {len(cpus)} logical CPUs"
            + (" (SMT)" if physical != len(cpus) else ""))
    roi = roi_decoder_status()
    run.env["roi_decoder"] = roi.library if roi.available else f"unavailable: {roi.reason}"
    run.add("cpu backend ROI decoder", "ok" if roi.available else "unavailable",
            detail=roi.library if roi.available else _first_line(Exception(roi.reason)))
    run.add("bundle", "ok" if notes else "none", detail="; ".join(notes) or "-")
    versions = []
    for module in ("nvidia.nvimgcodec", "torchvision", "torch"):
        try:
            mod = importlib.import_module(module)
            versions.append(f"{module} {getattr(mod, '__version__', '?')}")
        except Exception as exc:
            versions.append(f"{module}: {_first_line(exc)[:60]}")
    nvjpeg = [f"{d} {_dist_version(d)}" for d in ("nvidia-nvjpeg", "nvidia-nvjpeg-cu13",
                                                  "nvidia-nvjpeg-cu12") if _dist_version(d)]
    versions.append("nvJPEG " + (", ".join(nvjpeg) or "from the CUDA toolkit / torch"))
    run.env["versions"] = versions
    run.add("libraries", "ok", detail="; ".join(versions))
    if not run.gpu:
        run.env["gpu"] = None
        skip_rows(run, ["GPU", "NVML engine counters"],
                  "dry run (no GPU)" if run.dry else NEEDS_GPU)
        return
    name = torch.cuda.get_device_name(0)
    engines = next((n for key, n in (("H100", 7), ("H200", 7), ("A100", 1)) if key in name),
                   None)
    run.env["gpu"] = name
    run.add("GPU", "ok", detail=f"{name}, torch CUDA {torch.version.cuda}, hardware JPEG "
            f"engines: {engines if engines else 'unknown for this GPU'} (by its name)")
    run.env["nvml"] = counters = nvml_counters()
    run.add("NVML engine counters", "ok", detail="; ".join(f"{k}: {v}"
                                                         for k, v in counters.items()))


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvml_counters() -> dict[str, str]:
    """Each NVML engine counter GpuSampler reads: its value once, or why there is none."""
    try:
        import pynvml
    except ImportError:
        return {"pynvml": "not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"nvml": f"cannot initialise: {exc}"}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        found = {}
        for fn in ("nvmlDeviceGetJpgUtilization", "nvmlDeviceGetDecoderUtilization"):
            if not hasattr(pynvml, fn):
                found[fn] = "not in this pynvml"
                continue
            try:
                found[fn] = f"answers ({getattr(pynvml, fn)(handle)})"
            except pynvml.NVMLError as exc:
                found[fn] = f"not supported ({exc})"
        return found
    finally:
        pynvml.nvmlShutdown()


# ---- B. the datasets -------------------------------------------------------------------------

@dataclass
class Images:
    """One dataset of step B: where it is, and its encoded images and sizes in memory."""

    name: str
    path: Path
    encoded: list[np.ndarray]
    sizes: np.ndarray  # [N, 2] (height, width)


def _make_image(task) -> tuple[bytes, bytes, int, int, str]:
    """(mixed-set JPEG, all-4:2:0 JPEG, height, width, subsampling) of image `index` (in a pool
    process; seeded by the index alone)."""
    import io

    from PIL import Image

    index, source, seed, sizes = task
    rng = np.random.default_rng([seed, index])
    with Image.open(source) as img:
        img = img.convert("RGB")
        w, h = img.size
        # a random part (70-100% of each side) for variety, then the short side
        cw, ch = int(w * rng.uniform(0.7, 1.0)), int(h * rng.uniform(0.7, 1.0))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        img = img.crop((x0, y0, x0 + cw, y0 + ch))
    low, high = sizes.large if rng.random() < 0.1 else sizes.short
    short = int(rng.integers(low, high + 1))
    scale = short / min(cw, ch)
    img = img.resize((max(1, round(cw * scale)), max(1, round(ch * scale))),
                     Image.Resampling.BILINEAR)
    quality = int(rng.integers(75, 96))
    subsampling = "4:2:0" if rng.random() < 0.5 else "4:4:4"
    encoded = {}
    for kind in {subsampling, "4:2:0"}:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality, subsampling=kind)
        encoded[kind] = buf.getvalue()
    return encoded[subsampling], encoded["4:2:0"], img.size[1], img.size[0], subsampling


def source_jpegs(run: Run, folder: Path | None, work: Path) -> tuple[list[Path], str]:
    if folder is not None and folder.is_dir():
        from _datasets import jpeg_files

        return jpeg_files(folder), str(folder)
    from chute._sample_images import synthetic_jpeg

    synthetic = work / "synthetic-jpegs"
    synthetic.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files = []
    for i in range(8):
        files.append(synthetic / f"{i}.jpg")
        files[-1].write_bytes(synthetic_jpeg(rng, int(rng.integers(300, 500)),
                                             int(rng.integers(300, 500))))
    return files, "8 synthetic JPEGs (no bundle)"


def step_datasets(run: Run, sizes: Sizes, sources: list[Path], origin: str,
                  work: Path) -> dict[str, Images]:
    import multiprocessing

    from _datasets import FIELDS

    from chute.convert import ShardWriter

    start = time.perf_counter()
    tasks = [(i, sources[i % len(sources)], 36, sizes) for i in range(sizes.images)]
    procs = max(1, min(16, len(os.sched_getaffinity(0))))
    # spawned (CUDA is initialised here): a worker imports only this module's numpy and PIL
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        made = pool.map(_make_image, tasks, chunksize=8)
    made_s = time.perf_counter() - start
    sets = {}
    for column, name in ((0, "mixed"), (1, "420")):
        path = work / f"{name}.chute"
        with ShardWriter(path, FIELDS) as writer:
            for i, item in enumerate(made):
                writer.write({"image": item[column], "label": i % 1000, "height": item[2],
                              "width": item[3]})
        encoded = [np.frombuffer(item[column], np.uint8).copy() for item in made]
        sets[name] = Images(name, path, encoded, np.array([m[2:4] for m in made], np.int64))
    mixed = sets["mixed"]
    short = mixed.sizes.min(axis=1)
    s444 = sum(m[4] == "4:4:4" for m in made)
    mb = sum(e.nbytes for e in mixed.encoded) / 2**20
    run.add("ImageNet-like JPEGs", "ok", detail=(
        f"{len(made)} images per set from {origin} with {procs} processes in {made_s:.1f} s; "
        f"short side median {int(np.median(short))}, {int((short > 512).sum())} over 512, max "
        f"{int(short.max())}; mixed set {len(made) - s444} 4:2:0 + {s444} 4:4:4 ({mb:.0f} MiB)"
        f", and all 4:2:0"))
    return sets


# ---- C. decode-only ceilings -----------------------------------------------------------------

def rrc_windows(images: Images, ids: np.ndarray, epoch: int, crop: int) -> np.ndarray:
    """[B, 4] (top, left, height, width) decode windows of RandomResizedCrop boxes, as chute's
    nvimgcodec backend decodes them."""
    from chute.kernels import roi_windows
    from chute.pipelines import CropConfig
    from chute.pipelines.producers.image._crops import crop_boxes

    sizes = images.sizes[ids]
    boxes, _ = crop_boxes(0, epoch, ids, sizes[:, 0], sizes[:, 1], CropConfig((crop, crop)))
    windows, _ = roi_windows(boxes, sizes, (crop, crop))
    return np.asarray(windows)


class DecodeThreads:
    """`threads` decode threads, each with its own nvImageCodec Decoder, CUDA stream and reused
    images; `next_batch()` keeps one batch per thread in flight and returns the oldest's count
    of decoded images."""

    def __init__(self, run: Run, images: Images, backends: tuple[str, ...], batch: int,
                 threads: int, windows: bool, crop: int):
        from chute.pipelines.producers.image._nvimgcodec import import_nvimgcodec
        from chute.pipelines.producers.image._nvimgcodec_config import (
            DecoderConfig,
            make_decoder,
            size_hint,
        )

        self.codec = codec = import_nvimgcodec()
        self.images, self.batch, self.windows, self.crop = images, batch, windows, crop
        self.params = codec.DecodeParams(apply_exif_orientation=False,
                                         color_spec=codec.ColorSpec.SRGB)
        config = DecoderConfig(decoders=threads, gpu_backends=backends)
        hint = size_hint(images.sizes)
        device_id = 0 if run.gpu else None
        self.local = threading.local()

        def start():  # in a thread, at its first batch (an error fails that batch's row)
            self.local.decoder = make_decoder(codec, config, device_id, batch, hint)
            self.local.pool = None
            self.local.stream = None
            if run.gpu:
                import torch

                self.local.stream = torch.cuda.Stream()

        self.start = start
        self.pool = ThreadPoolExecutor(threads)
        self.threads = threads
        self.order = np.random.default_rng(0).permutation(len(images.encoded))
        self.issued = 0
        self.pending: deque = deque()
        self.failed = 0

    def _decode(self, number: int) -> int:
        n = len(self.order)
        start = (number * self.batch) % max(1, n - self.batch + 1)
        ids = self.order[start:start + self.batch]
        codec, local = self.codec, self.local
        if not hasattr(local, "decoder"):
            self.start()
        streams = [codec.CodeStream(self.images.encoded[i]) for i in ids]
        if self.windows:
            for k, (top, left, h, w) in enumerate(rrc_windows(self.images, ids, number,
                                                              self.crop).tolist()):
                streams[k] = streams[k].get_sub_code_stream(
                    region=codec.Region(top, left, top + h, left + w))
        cuda_stream = 0 if local.stream is None else local.stream.cuda_stream
        got = local.decoder.decode(streams, images=local.pool, params=self.params,
                                   cuda_stream=cuda_stream)
        if local.stream is not None:
            local.stream.synchronize()  # before the images are reused, and to count it done
        ok = sum(img is not None for img in got)
        if local.pool is None and ok == len(got):
            local.pool = list(got)
        self.failed += len(got) - ok
        return ok

    def next_batch(self) -> int:
        while len(self.pending) < self.threads:
            self.pending.append(self.pool.submit(self._decode, self.issued))
            self.issued += 1
        return self.pending.popleft().result()

    def close(self) -> None:
        for future in self.pending:
            with contextlib.suppress(Exception):
                future.result()
        self.pool.shutdown(wait=True)


def step_decode_ceilings(run: Run, sets: dict[str, Images], sizes: Sizes) -> None:
    grid = []
    backend_sets = [("hw",), ("cuda",), ("hybrid",), ("hw", "cuda", "hybrid")]
    for backends in backend_sets:
        for windows in (False, True):
            for batch in sizes.batches:
                for threads in (1, 2, 4):
                    grid.append(("mixed", backends, windows, batch, threads))
    # the all-4:2:0 set: the mixed decoders, both batch sizes, 2 threads
    grid += [("420", backend_sets[-1], windows, batch, 2) for windows in (False, True)
             for batch in sizes.batches]
    absent = nvimgcodec_missing()
    sync = synchronizer(run)
    run.plan(len(grid) + 2)  # + torchvision's rows
    for name, backends, windows, batch, threads in grid:
        label = (f"nvimgcodec {'+'.join(backends)} {'RRC windows' if windows else 'whole'} "
                 f"b{batch} x{threads} thread{'s' if threads > 1 else ''}"
                 + (" (all 4:2:0)" if name == "420" else ""))
        if not run.gpu:
            label += " (CPU-only decoder)"
        if absent:
            run.add(label, absent)
            continue
        if not run.gpu and (len(backends) != 1 or backends != ("hw",) or threads > 2):
            run.add(label, "dry run: same CPU decoder as the first rows")
            continue
        if run.left() < 0.3:
            run.add(label, "cut: step budget spent")
            continue
        decoders = None
        try:
            decoders = DecodeThreads(run, sets[name], backends, batch, threads, windows,
                                     sizes.crop)
            result = timed(run, decoders.next_batch, warmup=threads, count=None,
                           seconds=run.share(0.8 * sizes.seconds), sync=sync)
            failed = decoders.failed
        except Exception as exc:
            run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
            continue
        finally:
            if decoders is not None:
                decoders.close()
        run.add(label, **result, backends=list(backends), windows=windows, batch=batch,
                threads=threads, dataset=name, not_decoded=failed,
                detail=f"{result['batches']} batches in {result['seconds']:.1f} s"
                + (f"; {failed} images not decoded" if failed else ""))
    torchvision_decode_rows(run, sets["mixed"], sizes, sync)


def torchvision_decode_rows(run: Run, images: Images, sizes: Sizes, sync) -> None:
    for batch in sizes.batches:
        label = f"torchvision decode_jpeg(list, device={'cuda' if run.gpu else 'cpu'}) b{batch}"
        absent = torchvision_missing()
        if absent:
            run.add(label, absent)
            continue
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        tensors = [torch.from_numpy(e) for e in images.encoded]
        counter = iter(range(1 << 30))

        def next_batch(batch=batch, tensors=tensors, counter=counter):
            start = (next(counter) * batch) % max(1, len(tensors) - batch + 1)
            out = decode_jpeg(tensors[start:start + batch], mode=ImageReadMode.RGB,
                              device="cuda" if run.gpu else "cpu")
            return len(out)

        if run.left() < 0.2:
            run.add(label, "cut: step budget spent")
            continue
        try:
            result = timed(run, next_batch, warmup=1, count=None,
                           seconds=run.share(sizes.seconds), sync=sync)
        except Exception as exc:
            run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
            continue
        run.add(label, **result, batch=batch, whole=True,
                detail=f"{result['batches']} batches, whole images")


# ---- D. the ordering hazard ------------------------------------------------------------------

def step_hazard(run: Run, sources: list[Path]) -> None:
    hows = {False: "stream order only (the hazard)", True: "host wait before reuse (chute's)"}
    names = [f"{b}: {hows[wait]}" for b in ("hw", "cuda", "hybrid") for wait in (False, True)]
    absent = nvimgcodec_missing()
    if absent:
        skip_rows(run, names, absent)
        return
    if not run.gpu:
        twin_reuse_row(run, sources)
        skip_rows(run, names)
        return
    import torch

    pairs = hazard_batches(sources, 64)
    for backend in ("hw", "cuda", "hybrid"):
        for host_wait in (False, True):
            label = f"{backend}: {hows[host_wait]}"
            if run.left() < 0.5:
                run.add(label, "cut: step budget spent")
                continue
            try:
                wrong, reads_b, moved = hazard_trial(pairs, backend, host_wait, torch)
            except Exception as exc:
                run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
                continue
            n = len(pairs[0])
            if wrong is None:
                run.add(label, f"{backend} decoder took no image", detail="nothing to check")
                continue
            if host_wait:
                status = "ok" if wrong == 0 else "FAILED"
            else:
                status = "hazard shows" if wrong else "no hazard seen"
            run.add(label, status, images_wrong=wrong, images=n, reads_b=reads_b,
                    detail=f"{wrong}/{n} images the consumer read differ from batch A "
                    f"({reads_b} equal batch B) over 3 trials"
                    + ("; reused images moved" if moved else ""))


def hazard_batches(sources: list[Path], n: int) -> tuple[list[bytes], list[bytes]]:
    """Batches A and B of `n` 512x512 4:2:0 JPEGs each, B the negatives of A (same sizes)."""
    import io

    from PIL import Image, ImageOps

    a, b = [], []
    for i in range(n):
        with Image.open(sources[i % len(sources)]) as img:
            img = img.convert("RGB").resize((512, 512)).rotate(90 * (i // len(sources)))
        for out, pic in ((a, img), (b, ImageOps.invert(img))):
            buf = io.BytesIO()
            pic.save(buf, format="JPEG", quality=90)
            out.append(buf.getvalue())
    return a, b


def hazard_trial(pairs, backend: str, host_wait: bool, torch):
    """(images the consumer read wrong, of which equal to B's, whether the reused images
    moved) over 3 trials; wrong None where the decoder decoded nothing."""
    from chute.pipelines.producers.image._nvimgcodec import import_nvimgcodec
    from chute.pipelines.producers.image._nvimgcodec_config import DecoderConfig, make_decoder

    codec = import_nvimgcodec()
    batch_a, batch_b = pairs
    decoder = make_decoder(codec, DecoderConfig(gpu_backends=(backend,)), 0, len(batch_a),
                           (512, 512))
    params = codec.DecodeParams(apply_exif_orientation=False, color_spec=codec.ColorSpec.SRGB)
    decode_stream, consumer = torch.cuda.Stream(), torch.cuda.Stream()

    def decode(batch, images=None):
        return decoder.decode([codec.CodeStream(x) for x in batch], images=images,
                              params=params, cuda_stream=decode_stream.cuda_stream)

    def tensors(images):  # views of the decoded images (no copy)
        try:
            return [torch.as_tensor(img, device="cuda") for img in images]
        except (TypeError, RuntimeError):
            return [torch.from_dlpack(img) for img in images]

    ref_b = decode(batch_b)
    if any(img is None for img in ref_b):
        return None, 0, False
    decode_stream.synchronize()
    ref_b = torch.stack([t.clone() for t in tensors(ref_b)])
    pool = decode(batch_a)
    decode_stream.synchronize()
    ref_a = torch.stack([t.clone() for t in tensors(pool)])
    views = tensors(pool)
    addresses = [img.__cuda_array_interface__["data"][0] for img in pool]
    wrong = reads_b = 0
    moved = False
    read = torch.empty_like(ref_a)
    decoded, consumed = torch.cuda.Event(), torch.cuda.Event()
    for _ in range(3):
        decode(batch_a, pool)
        decoded.record(decode_stream)
        consumer.wait_event(decoded)
        with torch.cuda.stream(consumer):
            torch.cuda._sleep(200_000_000)  # ~0.1 s: the consumer is slow
            torch.stack(views, out=read)
        consumed.record(consumer)
        if host_wait:
            consumed.synchronize()  # chute's path: the worker waits on the host
        decode_stream.wait_event(consumed)  # stream order: B after the consumer's read
        again = decode(batch_b, pool)
        torch.cuda.synchronize()
        moved |= [img.__cuda_array_interface__["data"][0] for img in again] != addresses
        differs = (read != ref_a).flatten(1).any(1)
        wrong += int(differs.sum())
        reads_b += int((read == ref_b).flatten(1).all(1).sum())
    return wrong, reads_b, moved


def twin_reuse_row(run: Run, sources: list[Path]) -> None:
    """The CPU twin of D: decode A, then B into A's images; A's copy taken before is intact
    and B's decode equals a fresh one (the CPU decoder is synchronous: no hazard possible)."""
    from chute.pipelines.producers.image._nvimgcodec import import_nvimgcodec
    from chute.pipelines.producers.image._nvimgcodec_config import cpu_only_decoder

    label = "CPU-only decoder: reuse with images= (twin)"
    codec = import_nvimgcodec()
    batch_a, batch_b = hazard_batches(sources, 4)
    decoder = cpu_only_decoder(codec, 1)
    params = codec.DecodeParams(apply_exif_orientation=False, color_spec=codec.ColorSpec.SRGB)
    pool = decoder.decode([codec.CodeStream(x) for x in batch_a], params=params)
    read = [np.asarray(img.cpu()).copy() for img in pool]
    again = decoder.decode([codec.CodeStream(x) for x in batch_b], images=pool, params=params)
    fresh = decoder.decode([codec.CodeStream(x) for x in batch_b], params=params)
    same = all(np.array_equal(np.asarray(x.cpu()), np.asarray(y.cpu()))
               for x, y in zip(again, fresh, strict=True))
    differ = all(not np.array_equal(r, np.asarray(y.cpu())) for r, y in zip(read, fresh,
                                                                             strict=True))
    run.add(label, "ok" if same and differ else "FAILED",
            detail="B decoded into A's images equals a fresh decode of B; A read before it "
                   "differs from B")


# ---- E, F, G. chute's Pipeline, torchvision's path, training ---------------------------------

def chute_feed(run: Run, images: Images, backend: str, options: dict, batch: int,
               crop: int, views: bool = False, channels_last: bool = False):
    """(Pipeline, endless iterator of its batches, batches per epoch)."""
    import torch
    from _datasets import DINO_VIEWS

    from chute import ImageOptions, Pipeline

    fmt = torch.channels_last if channels_last else torch.contiguous_format
    common = dict(backend=backend, backend_options=options, dtype="float16", memory_format=fmt)
    image = (ImageOptions(views=DINO_VIEWS, **common) if views
             else ImageOptions(size=crop, **common))
    pipe = Pipeline(str(images.path), batch, fields={"image": image, "label": None},
                    device=run.device)

    def batches():
        for epoch in range(1 << 30):
            pipe.set_epoch(epoch)
            yield from pipe

    return pipe, batches(), len(images.encoded) // batch


def chute_row(run: Run, label: str, images: Images, backend: str, options: dict, batch: int,
              sizes: Sizes, *, views: bool = False, warm_epoch: bool = True, seconds: float,
              count: int | None = -1, **extra) -> dict | None:
    """One Pipeline measured: a warm-up epoch (or 2 batches), then `count` batches (default
    sizes.timed; None: as many as `seconds` allow), with its stage timers."""
    if run.left() < 1.0:
        run.add(label, "cut: step budget spent")
        return None
    absent = nvimgcodec_missing() if backend == "nvimgcodec" else None
    if absent:
        return run.add(label, absent)
    pipe = None
    try:
        pipe, batches, per_epoch = chute_feed(run, images, backend, options, batch,
                                              sizes.crop, views)
        warm = per_epoch if warm_epoch else 2
        start = time.perf_counter()
        for _ in range(warm):
            next(batches)
        warm_s = time.perf_counter() - start
        pipe.stats.stages.reset()
        result = timed(run, lambda: len(next(batches)["index"]), warmup=0,
                       count=sizes.timed if count == -1 else count,
                       seconds=run.share(seconds), sync=synchronizer(run))
        stages = pipe.stats.stages.as_dict()
    except Exception as exc:
        traceback.print_exc()
        return run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
    finally:
        if pipe is not None:
            pipe.close()
    counts = ", ".join(f"{k.rpartition('/')[2]} {v}" for k, v in stages["counts"].items())
    return run.add(label, **result, backend=backend, options=options, batch=batch, views=views,
                   stages=stages, **extra,
                   detail=f"{result['batches']} batches after {warm} warm-up ({warm_s:.1f} s)"
                   + (f"; {counts}" if counts else ""))


def nvimgcodec_missing() -> str | None:
    """None where nvImageCodec loads, else the row's status."""
    return missing("nvidia.nvimgcodec")


def torchvision_missing() -> str | None:
    """None where torchvision's decoder and transforms.v2 load, else the row's status."""
    return missing("torchvision.io", "torchvision.transforms.v2")


def torchvision_feed(run: Run, images: Images, batch: int, size: int, channels_last: bool):
    """torchvision's own GPU path: one batched decode_jpeg per batch, then transforms.v2
    RandomResizedCrop + flip + normalise image by image; endless (images, labels)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms import v2

    device = "cuda" if run.gpu else "cpu"
    augment = v2.Compose([v2.RandomResizedCrop(size, antialias=True),
                          v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                          v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    tensors = [torch.from_numpy(e) for e in images.encoded]
    rng = np.random.default_rng(0)
    while True:
        order = rng.permutation(len(tensors))
        for start in range(0, len(order) - batch + 1, batch):
            ids = order[start:start + batch]
            decoded = decode_jpeg([tensors[i] for i in ids], mode=ImageReadMode.RGB,
                                  device=device)
            x = torch.stack([augment(img) for img in decoded]).to(torch.float16)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, torch.as_tensor(ids % 1000, device=device)


def step_end_to_end(run: Run, sets: dict[str, Images], sizes: Sizes, cores: int) -> dict:
    """E, the rows the goals need first; returns the best K at the larger batch (the K of the
    views rows and of G's nvimgcodec feed)."""
    mixed, small, large = sets["mixed"], sizes.batches[0], sizes.batches[1]
    twin = "" if run.gpu else " (CPU twin)"
    run.plan(11)

    def nvimgcodec(batch: int, k: int, seconds: float):
        return chute_row(run, f"chute nvimgcodec{twin} RRC {sizes.crop} b{batch} K={k}", mixed,
                         "nvimgcodec", {"decoders": k}, batch, sizes, seconds=seconds,
                         role="nvimgcodec", k=k)

    rates = {k: (nvimgcodec(large, k, 10 * sizes.seconds) or {}).get("img_s") or 0.0
             for k in (1, 2, 4)}
    k = max(rates, key=lambda n: rates[n]) if any(rates.values()) else 2
    chute_row(run, f"chute cpu, {cores} threads, RRC {sizes.crop} b{large}", mixed, "cpu",
              {"threads": cores}, large, sizes, seconds=6 * sizes.seconds, role="cpu")
    label = f"torchvision decode_jpeg + v2 RRC {sizes.crop} b{large}"
    try:
        absent = torchvision_missing()
        if absent:
            raise ImportError(absent)
        feed = torchvision_feed(run, mixed, large, sizes.crop, False)
        result = timed(run, lambda: len(next(feed)[0]), warmup=2, count=sizes.timed,
                       seconds=run.share(6 * sizes.seconds), sync=synchronizer(run))
        run.add(label, **result, role="torchvision",
                detail=f"{result['batches']} batches after 2 warm-up")
    except ImportError as exc:
        run.add(label, str(exc))
    except Exception as exc:
        traceback.print_exc()
        run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
    chute_row(run, f"chute nvimgcodec{twin} views b{large} K={k}", mixed, "nvimgcodec",
              {"decoders": k}, large, sizes, views=True, seconds=6 * sizes.seconds,
              role="nvimgcodec views", k=k)
    chute_row(run, f"chute cpu, {cores} threads, views b{large}", mixed, "cpu",
              {"threads": cores}, large, sizes, views=True, seconds=6 * sizes.seconds,
              role="cpu views")
    for n in (1, 2, 4):
        nvimgcodec(small, n, 4 * sizes.seconds)
    chute_row(run, f"chute nvimgcodec{twin} RRC {sizes.crop} b{large} K={k} (all 4:2:0)",
              sets["420"], "nvimgcodec", {"decoders": k}, large, sizes,
              seconds=6 * sizes.seconds, role="nvimgcodec 420", k=k)
    return {"k": k}


def step_cpu_scaling(run: Run, sets: dict[str, Images], sizes: Sizes, logical: int,
                     physical: int) -> None:
    counts = sorted({n for n in (1, 2, 4, 8, 16) if n <= logical} | {physical, logical})
    batch = sizes.batches[0]
    run.plan(2 * len(counts))
    for threads in counts:
        for roi in (True, False):
            chute_row(run, f"chute cpu {threads} thread{'s' if threads > 1 else ''}, ROI "
                      f"decoder {'on' if roi else 'off'}, b{batch}", sets["mixed"], "cpu",
                      {"threads": threads, "roi_decode": roi}, batch, sizes,
                      warm_epoch=False, seconds=3 * sizes.seconds, count=None,
                      role="cpu scaling",
                      threads=threads, roi=roi)


def step_training(run: Run, sets: dict[str, Images], sizes: Sizes, k: int, cores: int) -> None:
    import torch

    model, what = training_model(run, sizes)
    batch, size = sizes.train_batch, sizes.train_size
    device = torch.device(run.device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    kind = "cuda" if run.gpu else "cpu"
    if run.gpu:
        torch.backends.cudnn.benchmark = True

    def train(x, y) -> int:
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        return int(x.shape[0])

    def synthetic():
        x = torch.randn(batch, 3, size, size, device=device, dtype=torch.float16)
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device=device)
        while True:
            yield x, y

    def from_chute(backend, options):
        pipe, batches, _ = chute_feed(run, sets["mixed"], backend, options, batch, size,
                                      channels_last=True)
        try:
            for b in batches:
                yield b["image"], b["label"].to(device, non_blocking=True).long() % 1000
        finally:
            pipe.close()

    twin = "" if run.gpu else " (CPU twin)"
    feeds = [("synthetic tensors on the device (the model's ceiling)", synthetic, "synthetic"),
             (f"chute nvimgcodec{twin} K={k}", lambda: from_chute("nvimgcodec", {"decoders": k}),
              "nvimgcodec"),
             (f"chute cpu {cores} threads", lambda: from_chute("cpu", {"threads": cores}), "cpu"),
             ("torchvision decode_jpeg + v2", lambda: torchvision_feed(
                 run, sets["mixed"], batch, size, True), "torchvision")]
    warm = 2 if run.dry else 8
    run.plan(len(feeds))
    for name, make, role in feeds:
        label = f"{what} fed by {name}"
        if run.left() < 1.0:
            run.add(label, "cut: step budget spent")
            continue
        feed = None
        try:
            absent = {"torchvision": torchvision_missing,
                      "nvimgcodec": nvimgcodec_missing}.get(role, lambda: None)()
            if absent:
                raise ImportError(absent)
            feed = make()
            result = timed(run, lambda feed=feed: train(*next(feed)), warmup=warm,
                           count=sizes.train_steps, seconds=run.share(3 * sizes.seconds + 4),
                           sync=synchronizer(run))
        except ImportError as exc:
            run.add(label, str(exc))
            continue
        except Exception as exc:
            traceback.print_exc()
            run.add(label, f"FAILED: {type(exc).__name__}: {_first_line(exc)}")
            continue
        finally:
            if feed is not None:
                feed.close()
        run.add(label, **result, role=f"train {role}",
                detail=f"{result['batches']} steps after {warm}, batch {batch} at {size} px")


def training_model(run: Run, sizes: Sizes):
    """(model on the run's device, channels_last, its name): ResNet-50 on a GPU (torchvision,
    else timm), a small model on the CPU."""
    import torch

    device = torch.device(run.device)
    model = None
    name = "ResNet-50" if run.gpu else "ResNet-18"
    arch = name.lower().replace("-", "")
    if not missing("torchvision.models"):
        model = getattr(importlib.import_module("torchvision.models"), arch)()
    elif not missing("timm"):
        model = importlib.import_module("timm").create_model(arch)
    if model is None:  # neither torchvision nor timm: a small CNN (the dry run only)
        if run.gpu:
            raise ImportError("neither torchvision nor timm is installed")
        name = "small CNN"
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 1000))
    model = model.to(device, memory_format=torch.channels_last).train()
    return model, f"{name} bf16 channels_last b{sizes.train_batch}"


# ---- V. video ----------------------------------------------------------------------------------

def step_video(run: Run, bundle: Path, work: Path) -> None:
    from gpu_video import step_video as video

    video(run, bundle, work)


# ---- goals -----------------------------------------------------------------------------------

def compute_goals(run: Run, physical: int) -> None:
    rows = run.rows
    ok = [r for r in rows if r.get("img_s")]

    def best(step: str, role: str | None = None, **match):
        found = [r for r in ok if r["step"] == step and (role is None or r.get("role") == role)
                 and all(r.get(k) == v for k, v in match.items())]
        return max(found, key=lambda r: r["img_s"], default=None)

    large = max((r.get("batch") or 0) for r in rows if r.get("role") == "nvimgcodec") \
        if any(r.get("role") == "nvimgcodec" for r in rows) else None
    e_gpu = best("E", "nvimgcodec", batch=large)
    ceiling = best("C")
    cpu = best("E", "cpu")
    tv = best("E", "torchvision")
    gpu_views, cpu_views = best("E", "nvimgcodec views"), best("E", "cpu views")
    train_gpu, train_syn = best("G", "train nvimgcodec"), best("G", "train synthetic")
    one = best("F", "cpu scaling", threads=1, roi=True)
    full = best("F", "cpu scaling", threads=physical, roi=True)

    def rate(a, b):
        return a["img_s"] / b["img_s"] if a and b else None

    def cpu_ratio(a, b):
        return (a["cpu_s_per_1000"] / b["cpu_s_per_1000"]
                if a and b and b["cpu_s_per_1000"] else None)

    goals = [
        ("nvimgcodec RRC 224 b256 vs the best decode-only ceiling of C", rate(e_gpu, ceiling),
         0.85, ">="),
        ("nvimgcodec vs the cpu backend on every core (img/s)", rate(e_gpu, cpu), 3.0, ">="),
        ("nvimgcodec vs the cpu backend (CPU core-s per image)", cpu_ratio(e_gpu, cpu), 0.1,
         "<="),
        ("nvimgcodec vs torchvision decode + v2 at 224", rate(e_gpu, tv), 5.0, ">="),
        ("views: nvimgcodec vs the cpu backend", rate(gpu_views, cpu_views), 2.0, ">="),
        ("training fed by nvimgcodec vs synthetic data", rate(train_gpu, train_syn), 0.95,
         ">="),
        (f"cpu backend scaling, 1 to {physical} physical cores (fraction of linear)",
         rate(full, one) / physical if rate(full, one) else None, 0.8, ">="),
    ]
    run.goals = []
    for name, value, target, sense in goals:
        if value is None:
            status = "not measured"
        else:
            met = value >= target if sense == ">=" else value <= target
            status = ("met" if met else "not met") + (" (dry run: CPU twins)" if run.dry else "")
        run.goals.append({"goal": name, "measured": value, "target": f"{sense} {target:g}",
                          "status": status})
        run.step = "goal"
        run.add(name, status, detail=f"measured {_cell(value, '.3f')}, target {sense} {target:g}")


# ---- main ------------------------------------------------------------------------------------

def watchdog(run: Run, seconds: float) -> None:
    """Ends the process when the run passes `seconds` (a step that hung in a library call):
    the rows so far stay written, and the table says where it stopped."""
    def fire():
        time.sleep(seconds)
        with contextlib.suppress(Exception):
            run.add(f"step {run.step}", f"TIMED OUT: the run passed {seconds:.0f} s")
            print(run.table(), flush=True)
        os._exit(3)

    threading.Thread(target=fire, daemon=True, name="gpu-ceiling-watchdog").start()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the table and JSON go (default $OUT, "
                        "else a temporary folder)")
    parser.add_argument("--jpegs", type=Path, help="source JPEGs (default: the bundle's)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the CPU twins, tiny (also CHUTE_GPU_DRY_RUN=1)")
    parser.add_argument("--video-only", action="store_true",
                        help="steps A and V only (the nvdec video backend, issue 40)")
    parser.add_argument("--no-video", action="store_true", help="steps A-G without V")
    args = parser.parse_args(argv)

    bundle = Path(os.environ.get("CHUTE_GPU_BUNDLE") or ROOT / ".gpu-bundle").resolve()
    notes = bundle_setup(bundle)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # _datasets

    from chute._device import cuda_device_count

    dry = args.dry_run or os.environ.get("CHUTE_GPU_DRY_RUN") == "1"
    gpu = not dry and cuda_device_count() > 0
    dry = not gpu
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else
                       Path(tempfile.mkdtemp(prefix="chute-gpu-ceiling-")))
    run = Run(out, dry, gpu)
    sizes, budgets = (DRY_SIZES, DRY_BUDGETS) if dry else (GPU_SIZES, BUDGETS)
    limit = VIDEO_TOTAL if args.video_only else TOTAL + (0 if args.no_video else BUDGETS["V"])
    watchdog(run, limit if gpu else 4 * sum(DRY_BUDGETS.values()))
    work = Path(tempfile.mkdtemp(prefix="chute-gpu-ceiling-data-"))
    try:
        run.step = "run"
        run.add("run", "dry run" if dry else "ok", detail=(
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} on {os.uname().nodename}, "
            f"output in {out}" + ("" if gpu or args.dry_run or os.environ.get(
                "CHUTE_GPU_DRY_RUN") == "1" else "; no CUDA device here: a dry run")))
        cores = len(os.sched_getaffinity(0))
        physical = cores
        with run.stage("A", "environment", budgets):
            step_environment(run, notes)
            physical = run.env["physical_cores"]
        if args.video_only:
            with run.stage("V", "video", budgets):
                step_video(run, bundle, work)
            run.goals = run.env.get("video_goals", [])
            run.write()
            print(run.table())
            return 0
        sets: dict[str, Images] = {}
        sources: list[Path] = []
        with run.stage("B", "datasets", budgets):
            sources, origin = source_jpegs(run, args.jpegs or bundle / "jpegs", work)
            sets = step_datasets(run, sizes, sources, origin, work)
        with run.stage("C", "decode-only ceilings", budgets):
            step_decode_ceilings(run, sets, sizes)
        with run.stage("D", "ordering hazard", budgets):
            step_hazard(run, sources)
        chosen = {"k": 2}
        with run.stage("E", "chute end to end", budgets):
            chosen = step_end_to_end(run, sets, sizes, cores)
        with run.stage("F", "cpu backend scaling", budgets):
            step_cpu_scaling(run, sets, sizes, cores, physical)
        with run.stage("G", "training", budgets):
            step_training(run, sets, sizes, chosen["k"], cores)
        if not args.no_video:
            with run.stage("V", "video", budgets):
                step_video(run, bundle, work)
        compute_goals(run, physical)
        run.goals += run.env.get("video_goals", [])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.write()
    print(run.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
