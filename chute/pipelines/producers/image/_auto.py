"""`ImageOptions(backend="auto")`: the image family's auto hook. The autotune library
(chute.autotune) measures the image producers' candidates through real Pipelines.

The rule: a decision stored for this machine + dataset + batch shape wins; else, where the GPU
backends cannot run, "cpu" without measuring; else a quick tune, stored for next time. Under
DDP only rank 0 decides and every other rank receives its decision (see `shared_across_ranks`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Literal, cast

from chute.autotune import DEFAULT_BUDGET, TuneParams, autotune, cache_dir, stored_decision
from chute.pipelines.producers._auto import shared_across_ranks
from chute.pipelines.producers._candidates import cuda_unavailable_reason, for_augment
from chute.pipelines.producers._registry import image_candidates
from chute.pipelines.producers._tune_runner import PipelineSource, open_pipeline
from chute.pipelines.producers.image._options import ImageOptions

__all__ = [
    "DEFAULT_AUTO_BUDGET",
    "tune_dataset",
    "resolve_auto_backend",
    "cpu_without_measuring",
    "views_backend",
    "decide",
    "pipeline_runner",
]

log = logging.getLogger("chute")
_noted: set = set()

DEFAULT_AUTO_BUDGET = 20.0  # seconds: the quick tune of ImageOptions(backend="auto") on a GPU


def _open(dataset):
    if not isinstance(dataset, (str, os.PathLike)):  # already open
        return dataset
    from chute.readers import open_dataset

    return open_dataset(dataset)


def tune_dataset(
    dataset,
    params: TuneParams,
    *,
    budget: float = DEFAULT_BUDGET,
    use_cache: bool = True,
    progress: bool = False,
    candidates=None,
    **tune_kw,
) -> dict:
    """Measure this machine's backends on `dataset` at `params` through real Pipelines, decide,
    store the decision (unless `use_cache` is False) and return it.

    Args:
        dataset: a dataset path, or an opened dataset.
        params: the batch shape (and device) to tune for.
        budget: total seconds for all measurements.
        use_cache: store the decision for backend="auto".
        progress: show a progress bar on stderr.
        candidates: what to compare (default: every backend's candidates for params.device;
            in eval none with DCT-domain scaling).
        **tune_kw: passed to chute.autotune.tune (window, tie_tolerance, ...).

    Returns:
        The `--json` object documented in chute/autotune/_report.py.
    """
    ds = _open(dataset)
    if candidates is None:
        candidates = for_augment(image_candidates(params.device), params.augment)
    runner = pipeline_runner(ds, batch_size=params.batch_size, image_size=params.image_size,
                             augment=params.augment, dtype=params.dtype, device=params.device)
    return autotune(ds, params, candidates=candidates, runner=runner, budget=budget,
                    use_cache=use_cache, progress=progress, **tune_kw)


def resolve_auto_backend(
    dataset,
    *,
    batch_size: int,
    image_size,
    augment: str,
    dtype: str = "float16",
    device: str = "cpu",
    budget: float = DEFAULT_AUTO_BUDGET,
    use_cache: bool = True,
    progress: bool = False,
) -> tuple[str, dict, str]:
    """(backend name, backend_options, reason) for ImageOptions(backend="auto") in this process.

    Args:
        dataset: a dataset path, or an opened dataset.
        batch_size: images per batch.
        image_size: output size, S or (H, W).
        augment: "train" or "eval".
        dtype: output dtype name.
        device: where batches go.
        budget: seconds for the quick tune when one is needed.
        use_cache: read and store decisions (False: neither).
        progress: show the quick tune's progress bar on stderr.
    """
    ds = _open(dataset)
    params = TuneParams(batch_size, image_size, augment, dtype, device)
    if use_cache:
        # A stored decision that is not on offer (e.g. DCT scaling in eval) is not used.
        record = stored_decision(ds, params,
                                 for_augment(image_candidates(params.device), params.augment))
        if record is not None:
            return (record["choice"], dict(record["backend_options"]),
                    f"autotune decision {record['key']} of {record.get('created', '?')}: "
                    f"{record['reason']}")
    unmeasured = cpu_without_measuring(params.device)
    if unmeasured is not None:
        return _with_unused_decisions(unmeasured, ds, params) if use_cache else unmeasured
    result = tune_dataset(ds, params, budget=budget, use_cache=use_cache, progress=progress)
    return (result["choice"], dict(result["backend_options"]),
            f"quick autotune ({budget:g}s budget, decision {result['key']}): {result['reason']}")


def cpu_without_measuring(
    device: str, cuda_devices: int | None = None
) -> tuple[str, dict, str] | None:
    """("cpu", {}, reason) when no GPU backend can run for `device` here, else None.

    Args:
        device: where batches go ("cpu", "cuda", "cuda:N").
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    why = cuda_unavailable_reason(device, cuda_devices)
    if why is None:
        gpu = [c for c in image_candidates(device) if c.backend != "cpu"]
        if any(c.available for c in gpu):
            return None
        why = _reasons(gpu)
    # only cpu candidates: nothing to compare the CPU with
    return "cpu", {}, f"cpu chosen without measuring: the GPU backends cannot run here ({why})"


def views_backend(device: str, cuda_devices: int | None = None) -> tuple[str, str]:
    """(backend, reason) for `ImageOptions(views=..., backend="auto")`: on a CUDA device the
    first GPU backend that decodes views and can run here (dali, then nvimgcodec: the
    autotuner's order), else "cpu". Not measured: the autotuner measures one-view Pipelines
    (docs/views.md, "Backends").

    Args:
        device: where batches go ("cpu", "cuda", "cuda:N").
        cuda_devices: CUDA devices visible (default: asked of torch).
    """
    why = cuda_unavailable_reason(device, cuda_devices)
    if why is not None:
        return "cpu", f"views= decoded by the cpu backend: {why}"
    gpu = [c for c in image_candidates(device) if c.backend in ("dali", "nvimgcodec")]
    for c in sorted(gpu, key=lambda c: c.cost):
        if c.available:
            return c.backend, (f"views= on {device}: {c.backend}, the first GPU backend that "
                               "decodes views and can run here (not measured; docs/views.md)")
    return "cpu", ("views= decoded by the cpu backend: no GPU backend can run here "
                   f"({_reasons(gpu)})")


def _reasons(gpu: list) -> str:
    """Each GPU candidate's own reason it cannot run (DALI missing, nvImageCodec missing, no
    CuPy), one per backend."""
    return "; ".join(dict.fromkeys(f"{c.backend}: {c.reason}" for c in gpu))


def _with_unused_decisions(decision: tuple, ds, params: TuneParams) -> tuple[str, dict, str]:
    """`decision` with a note (logged once) when decisions stored for this dataset were not used
    because they were tuned for another batch shape."""
    wanted = params.as_dict()
    shapes = []
    for path in sorted((cache_dir() / "autotune").glob("*.json")):
        try:
            record = json.loads(path.read_text())
            if record["dataset"]["fingerprint"] == ds.fingerprint and record["params"] != wanted:
                shapes.append(record["params"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not shapes:
        return decision
    differ = sorted({k for shape in shapes for k in wanted if shape.get(k) != wanted[k]})
    note = (f"; the autotune decision(s) stored for this dataset were skipped: they were tuned "
            f"for other {', '.join(differ)} ({shapes[0]}, this Pipeline asks for {wanted}); "
            "run `chute autotune` with this Pipeline's settings to use one")
    if note not in _noted:
        _noted.add(note)
        log.warning("chute: backend='auto'%s", note)
    name, options, reason = decision
    return name, options, reason + note


_IMAGE_REMEDY = "name a backend (backend='cpu', 'dali' or 'dali-native') on every rank"

decide = shared_across_ranks(resolve_auto_backend, remedy=_IMAGE_REMEDY)
"""`resolve_auto_backend` decided once per distributed job (rank 0 decides for every rank)."""


def pipeline_runner(
    dataset,
    *,
    batch_size: int,
    image_size: tuple[int, int],
    augment: str,
    dtype: str,
    device: str,
    seed: int = 0,
) -> Callable[[object], PipelineSource]:
    """A runner for the autotuner: candidate -> `PipelineSource` streaming `dataset` through a
    Pipeline with the candidate's `backend` and `params` (as backend_options).

    Args:
        dataset: an opened dataset.
        batch_size: images per batch.
        image_size: output (height, width).
        augment: "train" or "eval".
        dtype: output dtype name ("float16", "float32", "uint8").
        device: where batches are delivered.
        seed: the Pipeline seed (the order does not change throughput).
    """
    no_batch = (f"dataset {dataset.path} yields no batch of {batch_size} "
                "samples; use a smaller --batch-size")

    def open_source(candidate) -> PipelineSource:
        image = ImageOptions(size=image_size, backend=candidate.backend,
                             backend_options=dict(candidate.params), dtype=dtype)
        # a str from TuneParams, which (like Pipeline) accepts only "train" or "eval"
        mode = cast(Literal["train", "eval"], augment)
        pipe = open_pipeline(dataset, batch_size, fields={"image": image}, augment=mode,
                             device=device, seed=seed)
        return PipelineSource(pipe, device, no_batch=no_batch)

    return open_source
