"""`VideoOptions(backend="auto")`: the video family's auto hook. Its candidates (the cpu, dali
and nvdec video producers) are measured on this dataset by the autotune library through real
Pipelines, like the image family's: the same decision cache, table and `chute autotune`
(docs/autotune.md).

Where neither GPU-capable producer can run (DALI not installed; PyNvVideoCodec not importable
or no CUDA device for nvdec, which only runs on device="cuda") "cpu" is chosen without
measuring. A dataset DALI cannot decode here (e.g. H.264 in DALI's CPU mode)
gives "cpu", with DALI's error in the reason. Under DDP rank 0 decides for every rank
(`shared_across_ranks`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from chute._candidate import Candidate
from chute.autotune import TuneParams, autotune, stored_decision
from chute.pipelines.producers._auto import shared_across_ranks
from chute.pipelines.producers._candidates import dali_import_error
from chute.pipelines.producers._family import options_from_dict
from chute.pipelines.producers._tune_runner import PipelineSource, open_pipeline
from chute.pipelines.producers.video._options import VideoOptions

__all__ = ["candidates", "tune_video", "resolve_video_backend", "decide",
           "DEFAULT_VIDEO_BUDGET"]

DEFAULT_VIDEO_BUDGET = 10.0  # seconds: the quick tune of VideoOptions(backend="auto")


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


def _nvdec_unavailable(device: str) -> str | None:
    if not device.startswith("cuda"):
        return "it decodes on the GPU and the device is the CPU"
    from chute.pipelines.producers.video._nvdec import nvdec_import_error

    return nvdec_import_error()


def candidates(device: str) -> list[Candidate]:
    """The video producers as autotune candidates (the dali and nvdec ones unavailable, with
    the reason, where they cannot run)."""
    why, why_nvdec = _unavailable(device), _nvdec_unavailable(device)
    return [Candidate(name="video cpu (PyAV)", backend="cpu", cost=(0,)),
            Candidate(name="video dali", backend="dali", available=why is None,
                      reason=why or "", cost=(1,)),
            Candidate(name="video nvdec", backend="nvdec", available=why_nvdec is None,
                      reason=why_nvdec or "", cost=(1,))]


def _typed(field: str, options: VideoOptions | dict, buckets) -> tuple[VideoOptions, Any]:
    """(VideoOptions, bucket table or None) of options given as VideoOptions, or as a dict of
    its fields (`chute autotune`'s; any `backend` left out, the table under "buckets")."""
    if isinstance(options, VideoOptions):
        return options, buckets
    values = {k: v for k, v in options.items() if k not in ("buckets", "backend")}
    table = options["buckets"] if "buckets" in options else buckets
    return options_from_dict(VideoOptions, values, f"field {field!r}"), table


def _measured_options(options: VideoOptions, buckets, batch_size: int
                      ) -> tuple[VideoOptions, int]:
    """The field's options and batch size for a plain (bucket-free) measuring Pipeline: under
    buckets, the bucket of the largest clips, at its own batch size (the largest batch size
    with the largest frame count, height and width of any bucket is a batch no bucket makes,
    which may not fit in memory: docs/video.md, "Buckets")."""
    if buckets is not None:
        largest = max(buckets.buckets, key=lambda b: (b.num_frames * b.size[0] * b.size[1],
                                                      b.batch_size))
        # short="error" refuses videos shorter than that bucket's clips, which buckets leave
        # out instead (the bucketed Pipeline never refuses them): measured as "repeat"
        options = replace(options, num_frames=largest.num_frames, size=largest.size,
                          short="repeat")
        batch_size = largest.batch_size
    return options, batch_size


def _params(field: str, options: VideoOptions, batch_size: int, augment: str,
            device: str) -> TuneParams:
    size: Any = (0, 0) if options.size is None else options.size  # 0 x 0: the stored size
    shape = (field, int(options.num_frames), int(options.frame_interval), str(options.crop),
             str(options.layout))
    return TuneParams(batch_size, size, augment, str(options.dtype), device,
                      family="video", shape=shape)


def _runner(dataset, field: str, options: VideoOptions, batch_size: int,
            augment: Literal["train", "eval"], device: str):
    def open_source(candidate) -> PipelineSource:
        video = replace(options, backend=candidate.backend)
        pipe = open_pipeline(dataset, batch_size, fields={field: video}, augment=augment,
                             device=device, drop_last=False, rank=0, world_size=1)
        return PipelineSource(pipe, device, no_batch=f"dataset {dataset.path} yields no clip")

    return open_source


def tune_video(dataset, *, field: str, options: VideoOptions | dict, device: str,
               batch_size: int, augment: Literal["train", "eval"],
               budget: float = DEFAULT_VIDEO_BUDGET, use_cache: bool = True,
               progress: bool = False, buckets=None, **tune_kw) -> dict:
    """Measure the video producers on `dataset`'s field `field`, decide, store the decision
    (unless `use_cache` is False) and return it (the `--json` object of chute/autotune).

    Args:
        dataset: the opened dataset.
        field: the video field.
        options: its VideoOptions, or a dict of them (any `backend` is left out).
        device: where batches go.
        batch_size: clips per batch.
        augment: "train" or "eval".
        budget: total seconds for all measurements.
        use_cache: store the decision.
        progress: show a progress bar on stderr.
        buckets: the `Buckets` batching's table of the field, or None.
        **tune_kw: passed to chute.autotune.tune (window, clock, ...).
    """
    video, table = _typed(field, options, buckets)
    measured, batch_size = _measured_options(video, table, batch_size)
    return autotune(dataset, _params(field, measured, batch_size, augment, device),
                    candidates=candidates(device),
                    runner=_runner(dataset, field, measured, batch_size, augment, device),
                    budget=budget, use_cache=use_cache, progress=progress, unit="clip",
                    **{"window": 1.0, **tune_kw})


def resolve_video_backend(*, dataset, field: str, options: VideoOptions | dict, device: str,
                          batch_size: int, augment: Literal["train", "eval"],
                          budget: float = DEFAULT_VIDEO_BUDGET, use_cache: bool = True,
                          buckets=None) -> tuple[str, str]:
    """("cpu" | "dali" | "nvdec", reason) for a video field whose options say backend="auto": a
    decision stored for this machine, dataset and clip shape, else "cpu" where neither dali
    nor nvdec can run, else a quick tune (stored for next time).

    Args:
        dataset: the opened dataset.
        field: the video field.
        options: the field's VideoOptions, or a dict of them (any `backend` is left out).
        device: where batches go.
        batch_size: clips per batch.
        augment: "train" or "eval".
        budget: seconds for the quick tune when one is needed.
        use_cache: read and store decisions.
        buckets: the `Buckets` batching's table of the field, or None.
    """
    why, why_nvdec = _unavailable(device), _nvdec_unavailable(device)
    if why is not None and why_nvdec is not None:
        return "cpu", (f"cpu without measuring: the dali video backend cannot run here ({why}) "
                       f"and the nvdec one cannot either ({why_nvdec})")
    video, table = _typed(field, options, buckets)
    measured, measured_batch = _measured_options(video, table, batch_size)
    if use_cache:
        record = stored_decision(dataset, _params(field, measured, measured_batch, augment,
                                                  device), candidates(device))
        if record is not None:
            return (record["choice"], f"autotune decision {record['key']} of "
                                      f"{record.get('created', '?')}: {record['reason']}")
    result = tune_video(dataset, field=field, options=video, device=device,
                        batch_size=batch_size, augment=augment, budget=budget,
                        use_cache=use_cache, buckets=table)
    return (result["choice"], f"quick autotune ({budget:g}s budget, decision {result['key']}): "
                              f"{result['reason']}")


def _as_decision(**request) -> tuple[str, dict, str]:
    backend, reason = resolve_video_backend(**request)
    return backend, {}, reason


decide = shared_across_ranks(
    _as_decision, remedy="name the video field's backend on every rank "
    "(VideoOptions(backend='cpu'), 'dali' or 'nvdec')")
"""`resolve_video_backend` decided once per distributed job, as a (backend, {}, reason)."""
