"""The round-2 keyword arguments of `Pipeline` (image_size=, backend=, field_options=,
buckets=, unit=, max_duration=, ...), translated to the per-field options and batching of the
current spelling, and round 3's `shuffle=` translated to `order=`, each with a
DeprecationWarning that shows the new spelling. They go away in the next release
(docs/coming-from.md, "Migrating from round 2 and round 3")."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from chute.pipelines._fields import default_fields
from chute.pipelines.producers._family import options_from_dict
from chute.pipelines.producers._registry import family_of
from chute.pipelines.producers.audio._options import AudioOptions
from chute.pipelines.producers.image._options import ImageOptions
from chute.pipelines.producers.stored._options import Lookup
from chute.pipelines.producers.video._batching import Buckets
from chute.pipelines.sampling._batching import MaxDuration

__all__ = ["LEGACY_KEYWORDS", "translate", "order_from_shuffle"]

# round-2 keyword -> ImageOptions field
_IMAGE = {"image_size": "size", "backend": "backend", "backend_options": "backend_options",
          "dtype": "dtype", "layout": "layout", "mean": "mean", "std": "std", "crop": "crop",
          "eval_crop": "eval_crop", "memory_format": "memory_format"}
# DataLoader arguments people pass to a Pipeline -> what chute does instead
_INSTEAD = {
    "num_workers": "chute decodes on its own threads; set them per field, e.g. "
                   "ImageOptions(backend_options={'threads': N}) or VideoOptions(threads=N)",
    "pin_memory": "host staging is pinned automatically when device is CUDA",
    "collate_fn": "batches are collated by the producers; post-process them with transform=",
    "sampler": "the order is a pure function of (seed, epoch): use seed=, order=, rank= and "
               "world_size=",
    "batch_sampler": "use batch_size= or batching=MaxDuration(...) / Buckets(...)",
    "persistent_workers": "the prefetch thread lives as long as the Pipeline",
    "prefetch_factor": "use prefetch= (batches prepared ahead)",
}
LEGACY_KEYWORDS = frozenset({*_IMAGE, "field_options", "buckets", "unit", "max_duration",
                             "merge", "lookups"})


def _short(options: Any) -> str:
    """`ImageOptions(size=64)`: the options with only their non-default values."""
    if options is None:
        return "None"
    values = [f"{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)
              if getattr(options, f.name) != f.default]
    return f"{type(options).__name__}({', '.join(values)})"


def translate(dataset, batch_size, fields, batching, legacy: dict[str, Any]
              ) -> tuple[Any, dict[str, Any], Any]:
    """(batch_size, fields as {name: options}, batching) for a call that used round-2 keywords.

    Args:
        dataset: the open dataset.
        batch_size: the call's batch_size.
        fields: the call's fields= (None or names; a dict cannot be mixed with them).
        batching: the call's batching= (None; it cannot be mixed with buckets/max_duration).
        legacy: the round-2 keyword arguments given.
    """
    unknown = sorted(set(legacy) - LEGACY_KEYWORDS)
    if unknown:
        hints = "; ".join(f"{k}: {_INSTEAD[k]}" for k in unknown if k in _INSTEAD)
        raise TypeError(f"Pipeline() got unexpected keyword argument(s) {unknown}"
                        + (f" ({hints})" if hints else ""))
    if isinstance(fields, dict):
        raise ValueError(f"Pipeline: the round-2 keywords {sorted(legacy)} cannot be mixed "
                         "with fields={name: options}; give those options in the field's "
                         "options (ImageOptions, VideoOptions, AudioOptions, Lookup)")
    names = default_fields(dataset) if fields is None else tuple(fields)
    families = {f: family_of(f, dataset.specs[f]) for f in names if f in dataset.specs}
    out: dict[str, Any] = dict.fromkeys(names)
    image_values = {_IMAGE[k]: v for k, v in legacy.items() if k in _IMAGE}
    if image_values:
        images = [f for f in names if f in families and families[f].name == "image"]
        if not images:
            raise ValueError(f"Pipeline: {sorted(k for k in legacy if k in _IMAGE)} apply to "
                             f"image fields and none of fields={list(names)} holds images; "
                             "leave them out (each field's options go in fields={name: "
                             "options})")
        for f in images:
            out[f] = ImageOptions(**image_values)
    lookups = dict(legacy.get("lookups") or {})
    field_options = {f: dict(o) for f, o in (legacy.get("field_options") or {}).items()}
    for f in sorted(set(lookups) | set(field_options)):
        if f not in names:
            which = "lookups" if f in lookups else "field_options"
            raise ValueError(f"{which} name field {f!r}, which is not requested "
                             f"(fields={list(names)}); add it to fields=")
    for f, index in lookups.items():
        out[f] = Lookup(index, **field_options.pop(f, {}))
    for f, values in field_options.items():
        family = families.get(f)
        if family is None or family.options is None:
            raise ValueError(f"field_options[{f!r}]: field {f!r} takes no options")
        if family.name == "image":
            values = {_IMAGE.get(k, k): v for k, v in values.items()}
            base = out[f] or ImageOptions()
            given = {k.name: getattr(base, k.name) for k in dataclasses.fields(base)}
            out[f] = options_from_dict(ImageOptions, {**given, **values},
                                       f"field_options[{f!r}]")
        else:
            out[f] = options_from_dict(family.options, values, f"field_options[{f!r}]")
    if legacy.get("unit") is not None or legacy.get("merge") is not None:
        audio = [f for f in names if f in families and families[f].name == "audio"]
        if not audio:
            raise ValueError(f"Pipeline: unit=/merge= say what one audio sample is; request an "
                             f"audio field in fields= (got {list(names)})")
        for f in audio:
            out[f] = dataclasses.replace(out[f] or AudioOptions(), unit=legacy.get("unit"),
                                         merge=legacy.get("merge"))
    new_batch_size = False
    for key, make in (("max_duration", MaxDuration), ("buckets", Buckets)):
        if legacy.get(key) is None:
            continue
        if batching is not None:
            raise ValueError(f"Pipeline: pass either {key}= or batching=, not both")
        batching = make(legacy[key])
        if key == "max_duration" and batch_size is not None:
            batching, batch_size = MaxDuration(legacy[key], max_samples=batch_size), None
            new_batch_size = True
        if key == "buckets":
            batch_size = None  # round 2 ignored it: the config gives each bucket's
    new = [f"fields={{{', '.join(f'{f!r}: {_short(o)}' for f, o in out.items())}}}"]
    if new_batch_size:  # the cap moved into MaxDuration: the batch size goes
        new.insert(0, "batch_size=None")
    if batching is not None:
        new.append(f"batching={batching!r}")
    warnings.warn(f"Pipeline({', '.join(f'{k}=' for k in sorted(legacy))}...) is the round-2 "
                  f"spelling and goes away in the next release; write {', '.join(new)} "
                  "(docs/coming-from.md)", DeprecationWarning, stacklevel=4)
    return batch_size, out, batching


def order_from_shuffle(shuffle: Any, order: Any) -> Any:
    """The `order=` of a call that used round 3's `shuffle=` (True, False or ShardWindows),
    with a DeprecationWarning that shows it.

    Args:
        shuffle: the call's shuffle=.
        order: the call's order= (None: not given; it cannot be given with shuffle=).
    """
    from chute.pipelines.sampling._windows import ShardWindows

    if order is not None:
        raise ValueError(f"Pipeline: pass either shuffle= or order=, not both (got shuffle="
                         f"{shuffle!r}, order={order!r}); shuffle= is the round-3 spelling")
    new: Any
    if isinstance(shuffle, ShardWindows):
        new = shuffle
    elif isinstance(shuffle, (bool, np.bool_)):  # bool("yes") is True: only booleans
        new = "shuffle" if shuffle else "sequential"
    else:
        raise TypeError(f"Pipeline shuffle must be True, False or ShardWindows(...), got "
                        f"{shuffle!r}; write order='shuffle', 'sequential' or ShardWindows(...)")
    warnings.warn(f"Pipeline(shuffle={shuffle!r}) is the round-3 spelling and goes away in the "
                  f"next release; write order={new!r} (docs/coming-from.md)",
                  DeprecationWarning, stacklevel=5)  # _order_of, _build, __init__, the caller
    return new
