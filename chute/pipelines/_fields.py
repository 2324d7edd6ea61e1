"""Which fields a Pipeline delivers, and with which options: the `fields=` argument checked
against the dataset and each field's family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chute.pipelines.producers._family import Family
from chute.pipelines.producers._registry import family_of

__all__ = ["default_fields", "field_options"]


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' or word.startswith('nd') else 'a'} {word}"


def default_fields(dataset) -> tuple[str, ...]:
    """Without `fields=`: "image" (and "label") for a dataset with an "image" field, else every
    field its family delivers by default (not metadata, not tables)."""
    kinds = dataset.fields
    if "image" in kinds:
        return tuple(f for f in ("image", "label") if f in kinds)
    return tuple(f for f, spec in dataset.specs.items() if family_of(f, spec).by_default)


def field_options(dataset, fields) -> dict[str, tuple[Family, Any]]:
    """{name: (family, options)} for `fields=`: None (the defaults), names, or
    {name: options or None}. Options of the wrong class for a field's family raise."""
    kinds = dataset.fields
    if fields is None:
        given: dict[str, Any] = dict.fromkeys(default_fields(dataset))
    elif isinstance(fields, str):
        raise TypeError(f"fields must be names or {{name: options}}, got the string "
                        f"{fields!r}; write fields=({fields!r},)")
    elif isinstance(fields, Mapping):
        given = dict(fields)
    else:
        names = tuple(fields)
        if len(set(names)) != len(names):
            raise ValueError(f"fields {list(names)} repeat a name")
        given = dict.fromkeys(names)
    missing = [f for f in given if f not in kinds]
    for name in missing:
        reason = dataset.why_missing(name)  # a mix says which source lacks a field
        if reason:
            raise ValueError(f"{dataset.path}: {reason}")
    if missing:
        raise ValueError(f"fields {missing} are not in dataset {dataset.path}; it has "
                         f"{sorted(kinds)}")
    if not given:
        raise ValueError(f"no fields requested from {dataset.path}; name some of "
                         f"{sorted(kinds)} in fields=")
    if "index" in given:
        raise ValueError("fields must not name 'index': it is always delivered")
    for name in dataset.delivered_fields:  # e.g. a mix's "source" index
        given.setdefault(name, None)
    out = {}
    for name, options in given.items():
        family = family_of(name, dataset.specs[name])
        if options is None:
            options = family.default_options(name)
        elif family.options is None:
            raise ValueError(f"field {name!r} of {dataset.path} is {_a(family.name)} field, "
                             f"which takes no options; give None (got "
                             f"{type(options).__name__})")
        elif not isinstance(options, family.options):
            raise ValueError(f"field {name!r} of {dataset.path} is {_a(family.name)} field: "
                             f"{type(options).__name__} does not apply to it; give "
                             f"{family.options.__name__}(...) or None")
        out[name] = (family, options)
    return out
