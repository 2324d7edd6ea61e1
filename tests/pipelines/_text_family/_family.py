"""The text family: TextOptions -> the "test-text" producer."""

from __future__ import annotations

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from tests.pipelines._text_family._options import TextOptions


def build(field: str, options: TextOptions, ctx: FieldContext) -> FieldBuild:
    if options.max_len < 1:
        raise ValueError(f"TextOptions of field {field!r}: max_len must be >= 1")
    return FieldBuild(ctx.spec("test-text", field, {"max_len": options.max_len,
                                                    "upper": options.upper}))


FAMILY = Family("text", TextOptions, build)
