"""`chute demo`: the main job end to end — build a sample dataset, read it back, autotune,
then stream a few epochs through a Pipeline with the chosen backend and print throughput; then
build small generated datasets of the other modalities (latents in a zarr group, audio, video)
and stream each through a Pipeline for a few seconds.

`--json` prints one object on stdout, what the demo measured (the human lines and progress go
to stderr): {"device", "workdir", and per modality run: "rate" and "unit" (the headline
throughput), "path" (the dataset it wrote), its other measurements, or "skipped": reason};
"image" also has "autotune" (choice, backend_options, reason, key), "backend" and "epochs"
(img/s per epoch)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import sys
import time
from pathlib import Path

from chute._cli._args import default_device, image_size, positive
from chute._cli._output import add_json_flag, print_json

__all__ = ["add_parser", "run", "MODALITIES"]

MODALITIES = ("image", "latents", "audio", "video")


def modalities(text: str) -> tuple[str, ...]:
    """An argparse `type`: a comma-separated subset of MODALITIES ("all" for every one), in
    MODALITIES' order."""
    names = {name.strip().lower() for name in text.split(",") if name.strip()}
    if names == {"all"}:
        return MODALITIES
    unknown = sorted(names - set(MODALITIES))
    if unknown or not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of "
                                         f"{','.join(MODALITIES)} (or all), got {text!r}")
    return tuple(m for m in MODALITIES if m in names)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo",
        help="build sample datasets, autotune, stream them through Pipelines, print throughput",
        description="Build a sample chute dataset (synthetic JPEGs, or the images of --source), "
        "read it back, autotune the backends for the batch shape, then stream --epochs epochs "
        "through a Pipeline with the chosen backend and print img/s per epoch. Then build small "
        "generated datasets of the other modalities -- latents (a zarr group), audio (FLAC/WAV "
        "recordings, converted) and video (MP4 clips, converted) -- and stream each through a "
        "Pipeline for --seconds, printing its throughput. A modality whose optional package is "
        "missing is skipped with the extra to install.",
    )
    p.add_argument("--source", type=Path, default=None, metavar="DIR",
                   help="an image folder (class sub-folders, or flat) to use instead of "
                   "synthetic images, e.g. ../shared/data/imagenet-sample/images")
    p.add_argument("--workdir", type=Path, default=Path("demo-data"),
                   help="where the sample media and datasets are written (default ./demo-data)")
    p.add_argument("--images", type=positive(int), default=512,
                   help="number of synthetic images (default 512; ignored with --source)")
    p.add_argument("--batch-size", type=positive(int), default=64,
                   help="batch size of the image and latents Pipelines (default 64)")
    p.add_argument("--image-size", type=image_size, default=224, help="S or HxW (default 224)")
    p.add_argument("--augment", choices=("train", "eval"), default="train")
    p.add_argument("--epochs", type=positive(int), default=3)
    p.add_argument("--budget", type=positive(float), default=30.0, metavar="SECONDS",
                   help="time budget of the autotune step (default 30)")
    p.add_argument("--modalities", type=modalities, default=MODALITIES, metavar="LIST",
                   help="which to run, comma-separated: image,latents,audio,video "
                   "(default all)")
    p.add_argument("--seconds", type=positive(float), default=3.0, metavar="SECONDS",
                   help="how long each of latents, audio and video is streamed (default 3)")
    add_json_flag(p)
    p.set_defaults(func=run)
    return p


class _Steps:
    """Numbered step headers, "[k/n]", over the steps this run makes."""

    def __init__(self, total: int):
        self.total, self.done = total, 0

    def next(self) -> str:
        self.done += 1
        return self.tag()

    def tag(self) -> str:
        return f"[{self.done}/{self.total}]"


def _build_dataset(args, steps: _Steps, record: dict) -> Path:
    from chute._sample_images import write_image_folder
    from chute.convert import ConvertOptions, convert_imagefolder

    step = steps.next()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.source is not None:
        if not args.source.is_dir():
            raise SystemExit(f"chute demo: --source {args.source} is not a directory; give an "
                             "image folder (class sub-folders of images)")
        images = args.source
    else:
        images = args.workdir / "images"
        if images.exists():
            shutil.rmtree(images)
        print(f"{step} writing {args.images} synthetic JPEGs to {images}")
        write_image_folder(images, args.images, seed=0)
    dst = args.workdir / "sample.chute"
    print(f"{step} converting {images} -> {dst}")
    report = convert_imagefolder(images, dst, ConvertOptions(overwrite=True))
    print(f"      {report.written} samples written, {len(report.skipped)} skipped")
    record.update(images=str(images), path=str(dst), samples=report.written,
                  skipped=len(report.skipped))
    return dst


def _read_back(path: Path, steps: _Steps, record: dict) -> None:
    import numpy as np

    from chute.readers import dataset_info, open_dataset

    ds = open_dataset(path)
    info = dataset_info(path)
    ids = np.random.default_rng(0).permutation(len(ds))
    start = time.perf_counter()
    total = 0
    for i in ids:
        total += ds[int(i)]["image"].nbytes
    seconds = time.perf_counter() - start
    print(f"{steps.next()} read back {len(ds)} samples in random order: "
          f"{len(ds) / seconds:,.0f} samples/s, {total / seconds / 1e9:.2f} GB/s; "
          f"index overhead {info['overhead_pct']:.2f}%")
    record["read_back"] = {"samples_per_s": len(ds) / seconds, "gb_per_s": total / seconds / 1e9,
                           "index_overhead_pct": info["overhead_pct"]}


def _autotune(path: Path, args, steps: _Steps, record: dict) -> None:
    from chute.autotune import TuneParams, format_table
    from chute.pipelines import tune_dataset

    device = default_device()
    params = TuneParams(args.batch_size, args.image_size, args.augment, "float16", device)
    print(f"{steps.next()} autotune: batch {args.batch_size}, {args.image_size}px, "
          f"{args.augment}, float16 on {device} (budget {args.budget:g}s)")
    result = tune_dataset(path, params, budget=args.budget, progress=True)
    print(format_table(result))
    record["autotune"] = {k: result.get(k) for k in ("choice", "backend_options", "reason", "key")}


def _stream(path: Path, args, steps: _Steps, record: dict) -> str:
    """Stream the image epochs; returns the summary line's text."""
    from tqdm import tqdm

    from chute import ImageOptions, Pipeline
    from chute._cli._fields import opened, pipeline_fields

    best = 0.0
    image = ImageOptions(size=args.image_size, backend="auto")
    with opened(path) as dataset, Pipeline(  # image (and label)
            dataset, args.batch_size, fields=pipeline_fields(dataset, None, image),
            augment=args.augment) as pipe:
        print(f"{steps.next()} streaming {args.epochs} epochs with backend "
              f"{pipe.stats.backend!r} ({pipe.stats.backend_reason})")
        for epoch in range(args.epochs):
            pipe.set_epoch(epoch)
            n = 0
            start = time.perf_counter()
            for batch in tqdm(pipe, desc=f"epoch {epoch}", unit="batch", leave=False):
                n += batch["image"].shape[0]
            seconds = time.perf_counter() - start
            note = " (includes JIT compile and cold caches)" if epoch == 0 else ""
            print(f"      epoch {epoch}: {n} images, {n / seconds:,.0f} img/s{note}")
            best = max(best, n / seconds)
            record.setdefault("epochs", []).append(n / seconds)
        done = "replaced" if pipe.augment == "train" else "left out"
        print(f"      decode errors {done}: {pipe.stats.decode_errors}; "
              f"consumer waited {pipe.stats.wait_seconds:.2f}s in total")
        record.update(rate=best, unit="img/s", backend=pipe.stats.backend,
                      decode_errors=pipe.stats.decode_errors)
        return f"{best:,.0f} img/s (best of {args.epochs} epochs, backend {pipe.stats.backend})"


# --- the other modalities: each returns (summary, line) after its dataset is built and
# streamed, and fills its `record` (what --json prints); each Pipeline is built in one small
# function, the only place that spells its options.

def _latents_pipeline(path: Path, batch_size: int):
    from chute import ArrayOptions, Pipeline

    return Pipeline(path, batch_size,
                    fields={"latent": ArrayOptions(dtype="bfloat16"), "label": None})


def _audio_pipeline(path: Path, batch_size: int):
    from chute import AudioOptions, Pipeline

    return Pipeline(path, batch_size, fields={"audio": AudioOptions(unit="segment")})


def _video_pipeline(path: Path, batch_size: int):
    from chute import Pipeline, VideoOptions

    return Pipeline(path, batch_size, fields={
        "video": VideoOptions(num_frames=8, frame_interval=2, size=(64, 64), backend="cpu")})


def _timed(make_pipeline, seconds: float, measure) -> tuple[float, float, float, int]:
    """Build a Pipeline with `make_pipeline()` and iterate it (epoch after epoch) until
    `seconds` have passed after its first batch; returns (seconds from the start to the first
    batch, seconds measured after it, sum of `measure(batch)` over the batches after the
    first, batches after the first)."""
    start = time.perf_counter()
    first = None
    amount, batches = 0.0, 0
    with make_pipeline() as pipe:
        for epoch in itertools.count():
            pipe.set_epoch(epoch)
            for batch in pipe:
                now = time.perf_counter()
                if first is None:
                    first = now
                    continue
                amount += measure(batch)
                batches += 1
                if now - first >= seconds:
                    return first - start, now - first, amount, batches
            if first is None:  # an empty epoch: nothing to measure
                break
    now = time.perf_counter()
    return (first or now) - start, max(now - (first or now), 1e-9), amount, batches


def _latents(folder: Path, args, record: dict) -> tuple[str, str]:
    import numpy as np

    from chute._cli._demo_media import write_latents

    count, shape = 1024, (4, 32, 32)
    path = write_latents(folder / "latents.zarr", count, shape)
    print(f"      latents: zarr group of {count} float16 {list(shape)} latents + int labels "
          f"-> {path}")
    warm, seconds, n, batches = _timed(lambda: _latents_pipeline(path, args.batch_size),
                                       args.seconds, lambda b: b["latent"].shape[0])
    rate = f"{n / seconds:,.0f} samples/s"
    megabytes = float(n * 2 * np.prod(shape) / seconds / 1e6)
    record.update(path=str(path), rate=n / seconds, unit="samples/s", mb_per_s=megabytes,
                  **_timing(args.batch_size, batches, seconds, warm))
    return rate, (f"{rate}, {megabytes:,.0f} MB/s of float16 "
                  f"(batch {args.batch_size}, cast to bfloat16; {batches} batches in "
                  f"{seconds:.1f}s, {warm:.1f}s to the first)")


def _audio(folder: Path, args, record: dict) -> tuple[str, str]:
    from chute._cli._demo_media import write_audio

    count, rate, length, segment = 16, 16000, 6.0, 1.5
    path = write_audio(folder / "audio", count, rate, length, segment)
    print(f"      audio: {count} FLAC/WAV recordings of {length:g}s at {rate} Hz, "
          f"{segment:g}s segments -> {path}")
    batch_size = 16
    warm, seconds, n, batches = _timed(lambda: _audio_pipeline(path, batch_size),
                                       args.seconds, lambda b: b["audio"].shape[0])
    speed = f"{n / seconds:,.0f} segments/s, {n * segment / seconds:,.0f}s of audio per second"
    record.update(path=str(path), rate=n / seconds, unit="segments/s",
                  audio_seconds_per_s=n * segment / seconds,
                  **_timing(batch_size, batches, seconds, warm))
    return speed, (f"{speed} (batch {batch_size}; {batches} batches in {seconds:.1f}s, "
                   f"{warm:.1f}s to the first)")


def _video(folder: Path, args, record: dict) -> tuple[str, str]:
    from chute._cli._demo_media import write_video

    count, frames, size = 12, 30, 64
    path, codec = write_video(folder / "video", count, frames, size)
    print(f"      video: {count} {codec} MP4 clips of {frames} frames at {size}x{size} -> {path}")
    batch_size = 8
    warm, seconds, n, batches = _timed(lambda: _video_pipeline(path, batch_size),
                                       args.seconds, lambda b: b["video"].shape[0])
    rate = f"{n / seconds:,.0f} clips/s, {n * 8 / seconds:,.0f} frames/s"
    record.update(path=str(path), rate=n / seconds, unit="clips/s", frames_per_s=n * 8 / seconds,
                  codec=codec, **_timing(batch_size, batches, seconds, warm))
    return rate, (f"{rate} (clips of 8 frames, every 2nd; batch {batch_size}; {batches} "
                  f"batches in {seconds:.1f}s, {warm:.1f}s to the first)")


def _timing(batch_size: int, batches: int, seconds: float, warm: float) -> dict:
    """The common part of a modality's --json record."""
    return {"batch_size": batch_size, "batches": batches, "seconds": seconds,
            "first_batch_s": warm}


_RUNNERS = {"latents": _latents, "audio": _audio, "video": _video}


def _other_modalities(args, steps: _Steps, summary: dict, records: dict) -> None:
    from chute._cli._demo_media import missing_extra

    others = [m for m in args.modalities if m in _RUNNERS]
    print(f"{steps.next()} {', '.join(others)}: small generated datasets, each streamed "
          f"through a Pipeline for {args.seconds:g}s")
    args.workdir.mkdir(parents=True, exist_ok=True)
    for modality in others:
        reason = missing_extra(modality)
        if reason is not None:
            summary[modality] = f"skipped: {reason}"
            records[modality] = {"skipped": reason}
            print(f"      {modality}: skipped: {reason}")
            continue
        records[modality] = {}
        summary[modality], line = _RUNNERS[modality](args.workdir, args, records[modality])
        print(f"      {modality}: {line}")


def run(args) -> int:
    records: dict[str, dict] = {}
    # --json: the human lines go to stderr, the one JSON object alone to stdout.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        _run(args, records)
    if args.json:
        print_json({"device": default_device(), "workdir": str(args.workdir), **records})
    return 0


def _run(args, records: dict) -> None:
    image = "image" in args.modalities
    others = any(m in _RUNNERS for m in args.modalities)
    steps = _Steps(4 * image + others)
    summary: dict[str, str] = {}
    if image:
        records["image"] = {}
        path = _build_dataset(args, steps, records["image"])
        _read_back(path, steps, records["image"])
        _autotune(path, args, steps, records["image"])
        summary["image"] = _stream(path, args, steps, records["image"])
    if others:
        _other_modalities(args, steps, summary, records)
    print(f"throughput on {default_device()}:")
    width = max(map(len, summary))
    for modality, line in summary.items():
        print(f"  {modality:<{width}}  {line}")
