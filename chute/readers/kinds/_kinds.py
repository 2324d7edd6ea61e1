"""The field kind registry: kind name -> implementation. Adding a kind is one module
`_kind_<name>.py` plus one entry here (docs/design.md, "Field kinds")."""

from __future__ import annotations

from typing import Any

from chute.readers.kinds._kind import FieldKind
from chute.readers.kinds._kind_bytes import BYTES
from chute.readers.kinds._kind_json import JSON
from chute.readers.kinds._kind_ndarray import NDARRAY
from chute.readers.kinds._kind_scalar import SCALAR
from chute.readers.kinds._kind_table import TABLE

__all__ = ["KINDS", "get_kind", "declare", "infer_declaration", "field_stem", "field_files"]

# Order matters for inference only: the first kind whose `infer` accepts a value stores it.
KINDS: dict[str, FieldKind] = {
    kind.name: kind for kind in (NDARRAY, BYTES, SCALAR, JSON, TABLE)
}


def get_kind(name: str) -> FieldKind:
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown field kind {name!r}; chute knows {sorted(KINDS)}") from None


def declare(field: str, declaration: str | dict) -> dict:
    """A manifest spec from what a ShardWriter was told: a kind name ("bytes", "json",
    "ndarray"), a NumPy dtype name for a scalar column ("int64"), or a dict with "kind" and that
    kind's options (e.g. {"kind": "ndarray", "ragged": True, "compression": "zstd"})."""
    if isinstance(declaration, dict):
        options = dict(declaration)
        name = options.pop("kind", None)
    elif isinstance(declaration, str) and declaration in KINDS:
        name, options = declaration, {}
    else:
        name, options = SCALAR.name, {"dtype": declaration}
    if name not in KINDS:
        raise ValueError(f"field {field!r}: unknown kind {name!r}; use one of {sorted(KINDS)} "
                         "or a NumPy dtype such as 'int64' for a scalar column")
    return KINDS[name].declare(field, options)


def infer_declaration(value: Any) -> dict:
    """The declaration of the first kind that stores `value` (json stores anything)."""
    for kind in KINDS.values():
        found = kind.infer(value)
        if found is not None:
            return found
    raise AssertionError("the json kind accepts every value")


def field_stem(name: str, spec: dict) -> str:
    """Stem of a field's files inside a shard (a metadata update writes a new generation)."""
    return spec.get("file", name)


def field_files(name: str, spec: dict) -> dict[str, str]:
    """File name inside a shard -> role, for one field."""
    return get_kind(spec["kind"]).files(field_stem(name, spec), spec)
