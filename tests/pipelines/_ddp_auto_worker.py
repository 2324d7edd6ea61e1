"""One rank of the backend="auto" DDP test: the image family's decider replaced by a recording
resolver shared across ranks, used directly and through a Pipeline; write what this rank saw."""

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
        from chute.pipelines import ImageOptions, Pipeline
        from chute.pipelines.producers._auto import shared_across_ranks
        from chute.pipelines.producers.image import _auto as image_auto
        from chute.pipelines.producers.video import _auto as video_auto
        from chute.readers import open_dataset

        ds = open_dataset(dataset)
        request = dict(device="cpu", dataset=ds, batch_size=4, image_size=(16, 16),
                       dtype="float16", augment="train")
        remedy = image_auto._IMAGE_REMEDY
        image_auto.decide = shared_across_ranks(_recording(workdir, fail=False), remedy=remedy)
        decision = image_auto.decide(**request)
        image = ImageOptions(size=16, backend="auto")
        with Pipeline(ds, 4, fields={"image": image}, device="cpu") as pipe:
            from_pipeline = [pipe.stats.backend, pipe.stats.backend_options,
                             pipe.stats.backend_reason]

        image_auto.decide = shared_across_ranks(_recording(workdir, fail=True), remedy=remedy)
        try:
            image_auto.decide(**request)
            error = None
        except Exception as exc:  # every rank must fail, none may hang
            error = f"{type(exc).__name__}: {exc}"
        # the video family's shared decider, failing on rank 0: the error names video's remedy

        def failing_video(**request):
            raise RuntimeError(f"rank {dist.get_rank()} could not measure")

        video_auto.resolve_video_backend = failing_video
        try:
            video_auto.decide(**request, field="clip")
            video_error = None
        except Exception as exc:
            video_error = f"{type(exc).__name__}: {exc}"
        report = {"decision": list(decision), "pipeline": from_pipeline, "error": error,
                  "video_error": video_error}
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()
