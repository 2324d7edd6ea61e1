"""One rank of the backend="auto" DDP test: resolve through the Pipeline's injection point with
a recording resolver shared across ranks, and write what this rank saw."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch.distributed as dist

DECISION = ("cpu", {"threads": 1, "dct_scaling": True})


def _recording(workdir: str, *, fail: bool):
    """A resolver that appends each call of this rank to calls-rank{R}.jsonl."""

    def resolve(**request):
        rank = dist.get_rank()
        with Path(workdir, f"calls-rank{rank}.jsonl").open("a") as f:
            f.write(json.dumps({"device": request["device"], "fail": fail}) + "\n")
        if fail:
            raise RuntimeError(f"rank {rank} could not tune")
        return DECISION[0], dict(DECISION[1]), f"decided by the resolver on rank {rank}"

    return resolve


def run(rank: int, world_size: int, dataset: str, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=60))
    try:
        from chute._auto_backend import shared_across_ranks
        from chute.pipelines import Pipeline
        from chute.pipelines._resolve import register_auto_resolver, resolve_backend
        from chute.readers import open_dataset

        ds = open_dataset(dataset)
        request = dict(device="cpu", dataset=ds, batch_size=4, image_size=(16, 16),
                       dtype="float16", augment="train")
        register_auto_resolver(shared_across_ranks(_recording(workdir, fail=False)))
        decision = resolve_backend("auto", **request)
        with Pipeline(ds, 4, image_size=16, backend="auto", device="cpu") as pipe:
            from_pipeline = [pipe.stats.backend, pipe.stats.backend_options,
                             pipe.stats.backend_reason]

        register_auto_resolver(shared_across_ranks(_recording(workdir, fail=True)))
        try:
            resolve_backend("auto", **request)
            error = None
        except Exception as exc:  # every rank must fail, none may hang
            error = f"{type(exc).__name__}: {exc}"
        # the video field's shared resolver, failing on rank 0: the error names video's remedy
        from chute import _auto_video

        def failing_video(**request):
            raise RuntimeError(f"rank {dist.get_rank()} could not measure")

        _auto_video.resolve_video_backend = failing_video
        try:
            _auto_video._resolve(**request, field="clip")
            video_error = None
        except Exception as exc:
            video_error = f"{type(exc).__name__}: {exc}"
        report = {"decision": list(decision), "pipeline": from_pipeline, "error": error,
                  "video_error": video_error}
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()
