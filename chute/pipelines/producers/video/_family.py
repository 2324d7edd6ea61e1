"""The video family: clips decoded by the cpu (PyAV), dali or nvdec producer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from chute.pipelines.producers.video._options import VideoOptions
from chute.pipelines.producers.video._spec import VideoSpec

__all__ = ["FAMILY", "BACKENDS"]

# VideoOptions.backend -> producer
BACKENDS = {"cpu": "video", "dali": "video-dali", "nvdec": "video-nvdec"}


def build(field: str, options: VideoOptions, ctx: FieldContext) -> FieldBuild:
    backend: Any = options.backend  # a Literal of VideoOptions', or the decided one
    decision = None
    if backend == "auto":
        from chute.pipelines.producers.video._auto import decide

        backend, _, reason = decide(dataset=ctx.dataset, field=field, options=options,
                                    device=ctx.device, batch_size=ctx.batch_size,
                                    augment=ctx.augment, **ctx.batching)
        decision = {"backend": backend, "options": {}, "reason": reason}
    if backend not in BACKENDS:
        raise ValueError(f"VideoOptions of field {field!r}: backend={backend!r} is not a video "
                         f"backend; choose one of {sorted(BACKENDS)} or 'auto'")
    # the producer gets the VideoOptions itself (its defaults are the only ones) and what the
    # batching adds as VideoSpec attributes (the bucket table)
    spec = ctx.spec(BACKENDS[backend], field, replace(options, backend=backend),
                    spec_type=VideoSpec, **ctx.batching)
    return FieldBuild(spec, decision=decision)


FAMILY = Family("video", VideoOptions, build)
