"""Families of fields delivered as stored, without decoding: ndarray (ArrayOptions), table
(Lookup), scalar, json and bytes (no options)."""

from __future__ import annotations

from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from chute.pipelines.producers.stored._options import ArrayOptions, Lookup

__all__ = ["FAMILIES"]


def _array(field: str, options: ArrayOptions, ctx: FieldContext) -> FieldBuild:
    return FieldBuild(ctx.spec("ndarray", field, options))


def _lookup(field: str, options: Lookup, ctx: FieldContext) -> FieldBuild:
    return FieldBuild(ctx.spec("lookup", field, options))


def _as_is(producer: str):
    def build(field: str, options: None, ctx: FieldContext) -> FieldBuild:
        return FieldBuild(ctx.spec(producer, field, {}))

    return build


FAMILIES = {
    "ndarray": Family("ndarray", ArrayOptions, _array),
    "table": Family("table", Lookup, _lookup, by_default=False,
                    needs_options="is a table: deliver it through an index field with "
                                  "chute.Lookup(index_field), e.g. fields={name: "
                                  "Lookup('segment_to_video')}"),
    "scalar": Family("scalar", None, _as_is("scalar")),
    "json": Family("json", None, _as_is("json"), by_default=False, missing_ok=True),
    "bytes": Family("bytes", None, _as_is("bytes"), missing_ok=True),
}
