"""The `fields=` of the Pipelines that subcommands build from their flags: the image options
for every image field, a `Lookup` for every table named by --lookup, None for the rest."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from chute.errors import ChuteError

__all__ = ["opened", "pipeline_fields", "image_fields", "build_pipeline"]


@contextlib.contextmanager
def opened(path, **options: Any) -> Iterator[Any]:
    """The dataset at `path`, open for the block (closed after, when it has a `close`);
    `options` go to `open_dataset` (e.g. a zarr group's sample_array)."""
    from chute.readers import open_dataset

    dataset = open_dataset(path, **options)
    try:
        yield dataset
    finally:
        close = getattr(dataset, "close", None)
        if close is not None:
            close()


def pipeline_fields(dataset, names: Sequence[str] | None, image: Any,
                    lookups: Mapping[str, str] | None = None) -> dict[str, Any]:
    """{name: options or None} for `Pipeline(dataset, fields=...)`.

    Args:
        dataset: the open dataset.
        names: the fields to deliver (None: the Pipeline's default fields); tables named in
            `lookups` are added when missing.
        image: the `ImageOptions` of every image field among them.
        lookups: {table field: index field}: the table delivered per sample through the index.
    """
    from chute.pipelines import Lookup, default_fields, family_of

    lookups = dict(lookups or {})
    names = default_fields(dataset) if names is None else tuple(names)
    out: dict[str, Any] = {}
    for name in (*names, *(t for t in lookups if t not in names)):
        if name in lookups:
            out[name] = Lookup(lookups[name])
        elif name in dataset.specs and family_of(name, dataset.specs[name]).name == "image":
            out[name] = image
        else:
            out[name] = None  # the Pipeline names a field missing from the dataset
    return out


def image_fields(dataset) -> list[str]:
    """The fields of `dataset` that the Pipeline decodes as images."""
    from chute.pipelines import family_of

    found = []
    for name, spec in dataset.specs.items():
        try:
            if family_of(name, spec).name == "image":
                found.append(name)
        except ValueError:  # a field no producer family reads
            continue
    return found


def build_pipeline(*args: Any, **kwargs: Any) -> Any:
    """`Pipeline(*args, **kwargs)`, its argument errors (a batch larger than the dataset, a
    field the dataset lacks, ...) raised as ChuteError: one line on stderr, no traceback."""
    from chute import Pipeline

    try:
        return Pipeline(*args, **kwargs)
    except ValueError as exc:
        raise ChuteError(str(exc)) from None
