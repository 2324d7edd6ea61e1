"""TextOptions(backend="auto"): the text family's auto hook, measuring its two producers on the
dataset through real Pipelines with the autotune library, as the image and video families do."""

from __future__ import annotations

import dataclasses

from chute._candidate import Candidate
from chute.autotune import TuneParams, autotune
from chute.pipelines.producers._tune_runner import PipelineSource, open_pipeline

CANDIDATES = [Candidate(name="text on the host", backend="test-text", cost=(0,)),
              Candidate(name="text on the device", backend="test-text-device", cost=(1,))]


def decide(field: str, options, ctx) -> dict:
    """{"backend", "options", "reason"}: the faster producer on this dataset (not stored)."""
    def open_source(candidate) -> PipelineSource:
        measured = dataclasses.replace(options, backend=candidate.backend)
        pipe = open_pipeline(ctx.dataset, ctx.batch_size, fields={field: measured},
                             augment=ctx.augment, device=ctx.device, drop_last=False, rank=0,
                             world_size=1)
        return PipelineSource(pipe, ctx.device, no_batch=f"{ctx.dataset.path} has no text")

    params = TuneParams(ctx.batch_size, (0, 0), ctx.augment, "uint8", ctx.device,
                        family="text", shape=(field, options.max_len, options.unit))
    result = autotune(ctx.dataset, params, candidates=CANDIDATES, runner=open_source,
                      budget=0.4, use_cache=False, unit="text", window=0.05)
    return {"backend": result["choice"], "options": {}, "reason": result["reason"]}
