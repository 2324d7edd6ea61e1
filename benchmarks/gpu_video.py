"""Step V of benchmarks/gpu_ceiling.py (issue 40): the nvdec video backend on a lent GPU machine,
at most 3 minutes, against references computed here by the cpu backend.

    python3 benchmarks/gpu_video.py --prepare .gpu-bundle/video   # here (PyAV): data + refs
    CHUTE_GPU_BUNDLE=.gpu-bundle python3 benchmarks/gpu_ceiling.py --video-only   # there

`--prepare` (also run by `./dev.sh gpu-bundle`) converts a few short real videos (H.264 as
stored, and the same re-encoded to HEVC; generated ones where ../shared/data/videos is
missing) into a chute dataset and stores, for a fixed seed, the cpu backend's evaluation clips
(16 frames x stride 4 at 256 px, uint8) pooled over 8 x 8 pixel blocks: the references. The
lent machines have no PyAV, so the dataset travels converted.

The step (`step_video`):
- V1 references: every nvdec clip against the cpu backend's, pooled alike: mean and largest
  |difference| in levels (the two resize filters differ per pixel; pooled blocks compare the
  frames and colours, where H.264 is bit-exact in YUV and the colour conversion within 2).
- V2 clips/s of `nvdec` vs `cpu` (every core) on training clips 16 x 4 @ 256, CPU
  core-seconds per clip (the process's CPU time), mean SM % and NVDEC % (NVML), and the
  fallback counters.
- V3 the inference loader: `VideoClipLoader(backend="nvdec", device="cuda")` requests/s.
Each row fails alone. Where PyAV is missing (the lent machines have none, and its wheel is too
large for the bundle) the cpu rows say so and the nvdec-vs-cpu goals are not computed.
The dry run (no GPU) does what the CPU can: V1 for the cpu backend against its own references
(a reference set that does not reproduce is a failed row) and V2/V3 on the cpu backend.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "videos"
# short real H.264 videos (480p and 256p); each is stored COPIES times, as H.264 and as HEVC,
# so that an epoch keeps every core of the cpu backend busy (about 11 MB: the bundle's room)
SOURCES = ("cotracker_bear.mp4", "mmaction2_demo.mp4", "mmaction2_demo_skeleton.mp4")
COPIES = 3
CLIP = {"num_frames": 16, "frame_interval": 4, "size": 256, "dtype": "uint8"}
SEED, POOL, BATCH = 0, 8, 6

__all__ = ["prepare", "step_video", "pooled"]


def pooled(clips) -> np.ndarray:
    """uint8 [B, 3, T, H, W] -> float32 [B, 3, T, H / POOL, W / POOL] block means."""
    x = np.asarray(clips, np.float32)
    b, c, t, h, w = x.shape
    return x.reshape(b, c, t, h // POOL, POOL, w // POOL, POOL).mean(axis=(4, 6))


def _hevc(data: bytes) -> bytes:
    """`data` re-encoded to HEVC (MKV), its frames and rate kept."""
    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as src, av.open(out, "w", format="matroska") as dst:
        stream = src.streams.video[0]
        enc = dst.add_stream("libx265", rate=stream.average_rate)
        enc.width, enc.height = stream.codec_context.width, stream.codec_context.height
        enc.pix_fmt = "yuv420p"
        enc.options = {"preset": "ultrafast", "crf": "26", "x265-params": "log-level=none"}
        for frame in src.decode(stream):
            frame.pts = None
            for packet in enc.encode(frame):
                dst.mux(packet)
        for packet in enc.encode():
            dst.mux(packet)
    return out.getvalue()


def _generated(k: int) -> bytes:
    """A 3 s 640x360 H.264 video of smooth moving colour (where no real video is at hand)."""
    import av

    out = io.BytesIO()
    y, x = np.mgrid[0:360, 0:640].astype(np.float32)
    with av.open(out, "w", format="mp4") as c:
        stream = c.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
        stream.options = {"bf": "2", "crf": "18", "preset": "veryfast"}
        for t in range(90):
            img = np.stack([128 + 90 * np.sin(x / (29 + k) + t / 9), 60 + t + 0 * x,
                            128 + 90 * np.cos(y / 23 - t / 7)], -1).clip(0, 255)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img.astype(np.uint8),
                                                                   format="rgb24")):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def prepare(dest: Path) -> dict:
    """Write the step's dataset (dest/ds) and the cpu backend's references (dest/refs.npz)."""
    from chute.convert import convert_video_csv
    from chute.pipelines import Pipeline, VideoOptions

    dest.mkdir(parents=True, exist_ok=True)
    videos = []
    for k, name in enumerate(SOURCES):
        data = (REAL / name).read_bytes() if (REAL / name).exists() else _generated(k)
        videos += [(f"h264_{k}.mp4", data), (f"hevc_{k}.mkv", _hevc(data))]
    for name, data in videos:
        (dest / name).write_bytes(data)
    with open(dest / "videos.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path"], *[[name] for name, _ in videos] * COPIES])
    convert_video_csv(dest / "videos.csv", dest / "ds", progress=False, overwrite=True)
    for name, _ in videos:  # the dataset holds them now
        (dest / name).unlink()
    (dest / "videos.csv").unlink()
    index, refs = [], []
    with Pipeline(dest / "ds", BATCH, device="cpu", seed=SEED, augment="eval", drop_last=False,
                  fields={"video": VideoOptions(**CLIP, backend="cpu")}) as pipe:
        for batch in pipe:
            index += batch["index"].tolist()
            refs.append(pooled(batch["video"].numpy()))
    np.savez_compressed(dest / "refs.npz", index=np.asarray(index),
                        pooled=np.concatenate(refs).astype(np.float32))
    return {"videos": [name for name, _ in videos], "clips": len(index)}


def _clips(path: Path, backend: str, device: str, augment: str):
    """(index, pooled clips) of one evaluation epoch."""
    from chute.pipelines import Pipeline, VideoOptions

    index, got = [], []
    with Pipeline(path, BATCH, device=device, seed=SEED, augment=augment, drop_last=False,
                  fields={"video": VideoOptions(**CLIP, backend=backend)}) as pipe:
        for batch in pipe:
            index += batch["index"].tolist()
            got.append(pooled(batch["video"].cpu().numpy()))
        counts = pipe.stats.stages.as_dict()["counts"]
    return np.asarray(index), np.concatenate(got), counts


def reference_row(run, folder: Path, backend: str, device: str) -> None:
    refs = np.load(folder / "refs.npz")
    index, got, counts = _clips(folder / "ds", backend, device, "eval")
    order = np.argsort(index)
    want = refs["pooled"][np.argsort(refs["index"])]
    diff = np.abs(got[order] - want)
    per_clip = diff.reshape(len(diff), -1).mean(1)
    fallbacks = {k: v for k, v in counts.items() if ":cpu:" in k}
    ok = bool(per_clip.max() <= 2.0) and np.array_equal(np.sort(index), np.sort(refs["index"]))
    run.add(f"{backend} clips vs the cpu references", "ok" if ok else "MISMATCH",
            detail=f"{len(index)} clips; pooled {POOL}x{POOL} mean |diff| per clip max "
                   f"{per_clip.max():.2f}, largest block {diff.max():.1f} levels; "
                   f"fallbacks {fallbacks or 'none'}")


def rate_row(run, folder: Path, backend: str, device: str,
             seconds: float) -> tuple[float, float]:
    """(clips/s, CPU core-seconds per clip) of training clips on `backend` for about
    `seconds` (epochs repeat)."""
    from chute.autotune import GpuSampler
    from chute.pipelines import Pipeline, VideoOptions

    options = VideoOptions(**{**CLIP, "crop": "random"}, backend=backend)
    clips = 0
    with Pipeline(folder / "ds", BATCH, device=device, seed=SEED, drop_last=False,
                  fields={"video": options}) as pipe:
        next(iter(pipe))  # warm: sessions, kernels, threads
        sync = _sync(device)
        sync()
        with GpuSampler(device) as sampler:
            start, cpu = time.perf_counter(), time.process_time()
            epoch = 0
            while time.perf_counter() - start < seconds:
                epoch += 1
                pipe.set_epoch(epoch)
                for batch in pipe:
                    clips += len(batch["index"])
                    if time.perf_counter() - start >= seconds:
                        break
            sync()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        counts = pipe.stats.stages.as_dict()["counts"]
    rate, per_clip = clips / wall, cpu / max(clips, 1)
    nvdec = sampler.engine_mean("video_decoder")
    run.add(f"{backend} training clips 16x4 @ 256", "ok", img_s=rate,
            cpu_s_per_1000=1000 * cpu / max(clips, 1), sm_pct=sampler.mean,
            detail=f"clips/s (the img/s column); NVDEC {_pct(nvdec)}; {clips} clips in "
                   f"{wall:.1f} s; counters {counts or '-'}")
    return rate, per_clip


def loader_row(run, folder: Path, backend: str, device: str, seconds: float) -> None:
    from chute.infer import VideoClipLoader

    loader = VideoClipLoader(folder / "ds", backend=backend, device=device,
                             **{**CLIP, "size": 256}, threads=os.cpu_count() or 1)
    try:
        n = len(np.load(folder / "refs.npz")["index"])
        requests = [{"video": k % n, "clips": 2} for k in range(8)]
        loader(requests)  # warm
        _sync(device)()
        done, start = 0, time.perf_counter()
        failed = 0
        while time.perf_counter() - start < seconds:
            results = loader(requests)
            failed += sum(isinstance(r, Exception) for r in results)
            done += len(results)
        _sync(device)()
        wall = time.perf_counter() - start
    finally:
        loader.close()
    run.add(f"VideoClipLoader backend={backend}", "ok" if not failed else f"{failed} failed",
            img_s=done / wall, detail=f"requests/s of 2 clips each (the img/s column), "
                                      f"{loader.backend_reason}")


def _sync(device: str):
    if device == "cpu":
        return lambda: None
    import torch

    return torch.cuda.synchronize


def _pct(value) -> str:
    return "not reported" if value is None else f"{value:.0f}%"


def step_video(run, bundle: Path, work: Path) -> None:
    """Step V: what the GPU can show of the nvdec backend, and the CPU twins of the rest."""
    folder = bundle / "video"
    if not (folder / "refs.npz").exists():
        if run.gpu:
            run.add("video data", "FAILED: no references in the bundle; run ./dev.sh "
                    "gpu-bundle (it prepares them with PyAV)")
            return
        folder = work / "video"
        info = prepare(folder)
        run.add("video data", "ok", detail=f"prepared here: {info}")
    else:
        run.add("video data", "ok", detail=f"from the bundle: {folder}")
    device = run.device
    # the lent GPU machines have no PyAV (the cpu backend's decoder), which is too large to
    # travel in the bundle: there the cpu rows say so and the references stand for them
    no_av = None if importlib.util.find_spec("av") else "PyAV not installed here"
    _row(run, "cpu clips vs the cpu references", no_av, reference_row, run, folder, "cpu",
         "cpu")
    why = "needs a GPU"
    if run.gpu:
        from chute.pipelines import nvdec_import_error

        found = nvdec_import_error()
        why = "" if found is None else f"unavailable: {found[:160]}"
    _row(run, "nvdec clips vs the cpu references", why, reference_row, run, folder, "nvdec",
         device)
    seconds = 5.0 if run.dry else 35.0
    cpu = _row(run, "cpu training clips 16x4 @ 256", no_av, rate_row, run, folder, "cpu", "cpu",
               run.cap(seconds))
    gpu = _row(run, "nvdec training clips 16x4 @ 256", why, rate_row, run, folder, "nvdec",
               device, run.cap(seconds))
    if cpu and gpu:
        goals = run.env.setdefault("video_goals", [])
        goals.append({"goal": "nvdec clips/s / cpu backend's on all cores",
                      "measured": round(gpu[0] / cpu[0], 2), "target": ">= 5",
                      "met": gpu[0] >= 5 * cpu[0]})
        goals.append({"goal": "nvdec CPU core-s per clip / cpu backend's",
                      "measured": round(gpu[1] / cpu[1], 3), "target": "<= 0.1",
                      "met": gpu[1] <= 0.1 * cpu[1]})
    if not why:
        _row(run, "VideoClipLoader backend=nvdec", None, loader_row, run, folder, "nvdec",
             device, run.cap(10.0))
    else:
        _row(run, "VideoClipLoader backend=cpu", no_av, loader_row, run, folder, "cpu", "cpu",
             run.cap(3.0))


def _row(run, title: str, skip: str | None, fn, *args):
    """`fn(*args)`, or a row saying why it was skipped (`skip`) or how it failed: one row's
    failure never ends the step."""
    if skip:
        run.add(title, skip)
        return None
    try:
        return fn(*args)
    except Exception as exc:
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:140]
        run.add(title, f"FAILED: {type(exc).__name__}: {first}")
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, required=True,
                        help="write the dataset and the cpu backend's references here")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    print(prepare(args.prepare))
    return 0


if __name__ == "__main__":
    sys.exit(main())
