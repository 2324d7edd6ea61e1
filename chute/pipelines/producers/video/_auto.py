"""`VideoOptions(backend="auto")`: the video family's auto hook. The cpu and dali video
producers are measured on this dataset and the faster one used (docs/design.md, "Video clips").

Where the dali producer cannot run (DALI not installed; device="cuda" without a GPU) "cpu" is
chosen without measuring. Otherwise each producer reads the first batches of the Pipeline's
own plan twice, in the order cpu, dali, dali, cpu, through a real Pipeline; the better rate of
each decides. A dataset DALI cannot decode here (e.g. H.264 in DALI's CPU mode) gives "cpu",
with DALI's error in the reason. Decisions are kept for the life of the process; under DDP rank
0 decides for every rank (`shared_across_ranks`).
"""

from __future__ import annotations

import time

from chute.errors import BackendUnavailableError
from chute.pipelines.producers._auto import shared_across_ranks
from chute.pipelines.producers._candidates import dali_import_error

__all__ = ["resolve_video_backend", "decide", "MEASURED_BATCHES"]

MEASURED_BATCHES = 2  # timed batches per run, after one untimed batch (builds, warms caches)
_decided: dict = {}


def _unavailable(device: str) -> str | None:
    # unlike the image backends, the dali video producer also runs in DALI's CPU mode
    missing = dali_import_error()
    if missing is not None:
        return missing
    if device.startswith("cuda"):
        from chute._device import cuda_device_count

        if cuda_device_count() == 0:
            return "no CUDA device"
    return None


def _measured_options(options: dict) -> dict:
    """The field's options for a plain (bucket-free) measuring Pipeline: under buckets, the
    largest bucket's clip shape."""
    table = options.get("buckets")
    rest = {k: v for k, v in options.items() if k != "buckets"}
    if table is not None:
        t, h, w = table.max_clip_shape()
        rest.update(num_frames=t, size=(h, w))
    return rest


def _rate(dataset, field: str, options: dict, backend: str, device: str, batch_size: int,
          augment: str, batches: int) -> float:
    """Clips per second of `backend` over `batches` batches after the first."""
    from chute.pipelines._pipeline import Pipeline
    from chute.pipelines.producers._family import options_from_dict
    from chute.pipelines.producers.video._options import VideoOptions

    video = options_from_dict(VideoOptions, {**options, "backend": backend}, f"field {field!r}")
    with Pipeline(dataset, batch_size, device=device, augment=augment, drop_last=False,
                  fields={field: video}, rank=0, world_size=1) as pipe:
        it = iter(pipe)
        next(it, None)
        start, clips = time.perf_counter(), 0
        for _, batch in zip(range(batches), it, strict=False):
            clips += len(batch["index"])
        return clips / max(time.perf_counter() - start, 1e-9)


def resolve_video_backend(*, dataset, field: str, options: dict, device: str, batch_size: int,
                          augment: str, batches: int = MEASURED_BATCHES) -> tuple[str, str]:
    """("cpu" | "dali", reason) for a video field whose options say backend="auto".

    Args:
        dataset: the opened dataset.
        field: the video field.
        options: the field's options without `backend`.
        device: where batches go.
        batch_size: clips per batch.
        augment: "train" or "eval".
        batches: timed batches per run.
    """
    why = _unavailable(device)
    if why is not None:
        return "cpu", f"cpu without measuring: the dali video backend cannot run here ({why})"
    measured = _measured_options(options)
    key = (dataset.fingerprint, field, repr(sorted(measured.items())), device, batch_size,
           augment)
    if key not in _decided:
        _decided[key] = _measure(dataset, field, measured, device, batch_size, augment, batches)
    return _decided[key]


def _measure(dataset, field, options, device, batch_size, augment, batches) -> tuple[str, str]:
    rates: dict[str, list[float]] = {"cpu": [], "dali": []}
    for backend in ("cpu", "dali", "dali", "cpu"):
        try:
            rates[backend].append(_rate(dataset, field, options, backend, device, batch_size,
                                        augment, batches))
        except BackendUnavailableError as exc:
            return "cpu", f"cpu: the dali video backend cannot read this dataset here ({exc})"
    cpu, dali = max(rates["cpu"]), max(rates["dali"])
    choice = "dali" if dali > cpu else "cpu"
    return choice, (f"measured {batches} batches of {batch_size} twice each on {device}: cpu "
                    f"{cpu:.2f} clips/s, dali {dali:.2f} clips/s")


def _as_decision(**request) -> tuple[str, dict, str]:
    backend, reason = resolve_video_backend(**request)
    return backend, {}, reason


decide = shared_across_ranks(
    _as_decision, remedy="name the video field's backend on every rank "
    "(VideoOptions(backend='cpu') or 'dali')")
"""`resolve_video_backend` decided once per distributed job, as a (backend, {}, reason)."""
