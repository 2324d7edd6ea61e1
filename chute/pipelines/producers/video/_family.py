"""The video family: clips decoded by the cpu (PyAV), dali or nvdec producer."""

from __future__ import annotations

from dataclasses import asdict

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from chute.pipelines.producers.video._options import VideoOptions

__all__ = ["FAMILY", "BACKENDS"]

# VideoOptions.backend -> producer
BACKENDS = {"cpu": "video", "dali": "video-dali", "nvdec": "video-nvdec"}


def build(field: str, options: VideoOptions, ctx: FieldContext) -> FieldBuild:
    values = asdict(options)
    backend = values.pop("backend")
    if values["threads"] is None:
        values.pop("threads")
    values.update(ctx.batching)  # e.g. the bucket table
    decision = None
    if backend == "auto":
        from chute.pipelines.producers.video._auto import decide

        backend, _, reason = decide(dataset=ctx.dataset, field=field, options=dict(values),
                                    device=ctx.device, batch_size=ctx.batch_size,
                                    augment=ctx.augment)
        decision = {"backend": backend, "options": {}, "reason": reason}
    if backend not in BACKENDS:
        raise ValueError(f"VideoOptions of field {field!r}: backend={backend!r} is not a video "
                         f"backend; choose one of {sorted(BACKENDS)} or 'auto'")
    return FieldBuild(ctx.spec(BACKENDS[backend], field, values), decision=decision)


FAMILY = Family("video", VideoOptions, build)
