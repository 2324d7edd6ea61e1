"""The audio family: segments of recordings, resampled and perturbed; its options may make the
Pipeline's samples segments of the recordings (`AudioOptions.unit`)."""

from __future__ import annotations

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from chute.pipelines.producers.audio._merge import check_merge
from chute.pipelines.producers.audio._options import AudioOptions
from chute.pipelines.producers.audio._units import sample_unit

__all__ = ["FAMILY"]


def unit(field: str, options: AudioOptions, dataset):
    """The sample unit these options ask for (None: dataset rows)."""
    merge = check_merge(options.merge, options.unit)
    if options.unit is None:
        return None
    return sample_unit(dataset, options.unit, options.meta_field, merge=merge)


def build(field: str, options: AudioOptions, ctx: FieldContext) -> FieldBuild:
    return FieldBuild(ctx.spec("audio", field, options))


FAMILY = Family("audio", AudioOptions, build, unit=unit)
