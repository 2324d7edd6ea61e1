"""backend="auto" for chute: the autotuner library (chute.autotune) run on the Pipeline's own
backends (chute.pipelines). Neither of those imports the other; this module, above both, joins
them, and importing it registers the result as the Pipeline's "auto" resolver.

The rule: a decision stored for this machine + dataset + batch shape wins; else, where the GPU
backends cannot run, "cpu" without measuring; else a quick tune, stored for next time. Under
DDP only rank 0 decides and every other rank receives its decision (see `shared_across_ranks`).
"""

from __future__ import annotations

import functools
import json
import logging

from chute.autotune import DEFAULT_BUDGET, TuneParams, autotune, stored_decision
from chute.errors import BackendUnavailableError
from chute.pipelines._resolve import (
    AutoResolver,
    cpu_without_measuring,
    register_auto_resolver,
)
from chute.pipelines.producers._candidates import for_augment
from chute.pipelines.producers._registry import image_candidates
from chute.pipelines.producers._tune_runner import pipeline_runner

__all__ = [
    "DEFAULT_AUTO_BUDGET",
    "tune_dataset",
    "resolve_auto_backend",
    "shared_across_ranks",
]

log = logging.getLogger("chute")
_noted: set = set()

DEFAULT_AUTO_BUDGET = 20.0  # seconds: the quick tune of Pipeline(backend="auto") on a GPU machine


def _open(dataset):
    if hasattr(dataset, "fingerprint"):
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
    """(backend name, backend_options, reason) for Pipeline(backend="auto") in this process.

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


def _with_unused_decisions(decision: tuple, ds, params: TuneParams) -> tuple[str, dict, str]:
    """`decision` with a note (logged once) when decisions stored for this dataset were not used
    because they were tuned for another batch shape."""
    from chute.autotune._cache import cache_dir

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


def _process_group():
    """torch.distributed when a job of two or more ranks is initialised, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist


def _decide_on_rank_zero(dist, resolver: AutoResolver, request: dict,
                         remedy: str) -> tuple[str, dict, str]:
    world = dist.get_world_size()
    if dist.get_rank() == 0:
        try:
            name, options, reason = resolver(**request)
        except Exception as exc:
            # the other ranks are waiting in the broadcast: tell them, then fail here too
            dist.broadcast_object_list([("failed", f"{type(exc).__name__}: {exc}")], src=0)
            raise
        decision = (name, dict(options), f"{reason} [decided on rank 0 for all {world} ranks]")
        dist.broadcast_object_list([("ok", decision)], src=0)
        return decision
    box = [None]
    dist.broadcast_object_list(box, src=0)
    status, value = box[0]
    if status != "ok":
        raise BackendUnavailableError(
            f"backend='auto': rank 0 could not choose a backend for all {world} ranks ({value}). "
            f"Fix the error rank 0 reports, or {remedy.format_map(request)}."
        )
    return value


_IMAGE_REMEDY = "name a backend (backend='cpu', 'dali' or 'dali-native') on every rank"


def shared_across_ranks(resolver: AutoResolver, *, remedy: str = _IMAGE_REMEDY) -> AutoResolver:
    """`resolver`, run once per distributed job: under an initialised torch.distributed job of
    two or more ranks, rank 0 resolves (and tunes if it must, while the others do not compete
    for the machine) and broadcasts the decision; the other ranks wait for it. Every rank must
    therefore build its Pipeline(backend="auto") at the same point, as DDP code does. Outside
    such a job `resolver` runs as is.

    Args:
        resolver: the resolver to share (see chute.pipelines._resolve.AutoResolver).
        remedy: what the other ranks' error tells the user to do instead of "auto", formatted
            with the request's keyword arguments (the default names the image backends).
    """

    @functools.wraps(resolver)
    def resolve(**request) -> tuple[str, dict, str]:
        dist = _process_group()
        if dist is None:
            return resolver(**request)
        return _decide_on_rank_zero(dist, resolver, request, remedy)

    return resolve


register_auto_resolver(shared_across_ranks(resolve_auto_backend))
