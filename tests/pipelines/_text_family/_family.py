"""The text family: TextOptions -> the "test-text" or "test-text-device" producer (or the one
its auto hook measures faster), samples per row or per word."""

from __future__ import annotations

import dataclasses

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from tests.pipelines._text_family._auto import decide
from tests.pipelines._text_family._options import TextOptions
from tests.pipelines._text_family._units import unit

_PRODUCER = "tests.pipelines._text_family._producer"


def build(field: str, options: TextOptions, ctx: FieldContext) -> FieldBuild:
    if options.max_len < 1:
        raise ValueError(f"TextOptions of field {field!r}: max_len must be >= 1")
    decision = None
    if options.backend == "auto":
        decision = decide(field, options, ctx)
        options = dataclasses.replace(options, backend=decision["backend"])
    elif options.backend not in FAMILY.producers:
        raise ValueError(f"TextOptions of field {field!r}: backend {options.backend!r} is none "
                         f"of {sorted(FAMILY.producers)} or 'auto'")
    return FieldBuild(ctx.spec(options.backend, field, options), decision=decision)


FAMILY = Family("text", TextOptions, build, unit=unit,
                producers={"test-text": _PRODUCER, "test-text-device": _PRODUCER})
