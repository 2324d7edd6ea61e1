"""The producer registry: producer name -> module, and which producer fills a field
(docs/design.md, "Plans and producers"). Adding a producer is one module plus one entry here."""

from __future__ import annotations

import importlib
from types import ModuleType

from chute.errors import BackendUnavailableError

__all__ = ["PRODUCERS", "IMAGE_BACKENDS", "MEDIA_PRODUCERS", "KIND_PRODUCERS",
           "MEDIA_OF_LEGACY_FIELDS", "producer_module", "create_producer", "field_media",
           "image_candidates", "stored_producer", "FIELD_BACKENDS", "field_backend",
           "delivered_by_default", "NOT_BY_DEFAULT"]

# producer name -> module exporting create(spec) and candidates(device); imported only when
# asked for, so the GPU producers' imports never run on the CPU path.
PRODUCERS: dict[str, str] = {
    "cpu": "chute.pipelines.producers.image._cpu",
    "dali": "chute.pipelines.producers.image._dali",
    "dali-native": "chute.pipelines.producers.image._dali",
    "nvimgcodec": "chute.pipelines.producers.image._nvimgcodec",
    "ndarray": "chute.pipelines.producers.stored._ndarray",
    "scalar": "chute.pipelines.producers.stored._scalar",
    "json": "chute.pipelines.producers.stored._list",
    "bytes": "chute.pipelines.producers.stored._list",
    "video": "chute.pipelines.producers.video._cpu",
    "video-dali": "chute.pipelines.producers.video._dali",
    "audio": "chute.pipelines.producers.audio._producer",
    "lookup": "chute.pipelines.producers.stored._lookup",
}

# The producers a Pipeline's `backend` argument chooses between, for fields of media "image".
IMAGE_BACKENDS = ("cpu", "dali", "dali-native", "nvimgcodec")

# Field media -> producer, for encoded media other than images (whose producer is the
# Pipeline's `backend`).
MEDIA_PRODUCERS: dict[str, str] = {
    "video": "video",
    "audio": "audio",
}

# Producer -> the field option `backend` values that replace it by another producer of the
# same outputs (field_options={"video": {"backend": "dali"}}).
FIELD_BACKENDS: dict[str, dict[str, str]] = {
    "video": {"cpu": "video", "dali": "video-dali"},
}

# Field kind -> producer, for fields that are delivered as stored (no decoding).
KIND_PRODUCERS: dict[str, str] = {
    "ndarray": "ndarray",
    "scalar": "scalar",
    "json": "json",
    "bytes": "bytes",
    "table": "lookup",  # needs an index field: Pipeline(lookups={table: index})
}

# Datasets written before fields declared their media: (field name, kind) -> media.
MEDIA_OF_LEGACY_FIELDS = {("image", "bytes"): "image"}


# Producers whose fields a Pipeline leaves out unless asked for (metadata).
NOT_BY_DEFAULT = frozenset({"json", "lookup"})  # metadata; tables need lookups=


def stored_producer(name: str, spec: dict) -> str:
    """The producer of a field delivered without a decoder (by its media, else its kind)."""
    found = MEDIA_PRODUCERS.get(field_media(name, spec)) or KIND_PRODUCERS.get(spec["kind"])
    if found is None:
        raise ValueError(f"field {name!r} (kind {spec['kind']!r}) has no producer; add one to "
                         "chute/pipelines/producers/_registry.py (KIND_PRODUCERS or "
                         "MEDIA_PRODUCERS)")
    return found


def field_backend(producer: str, options: dict, auto=None) -> tuple[str, dict]:
    """(producer, options without `backend`) for a field whose options may name a backend.

    Args:
        auto: `auto(options without backend) -> backend`, deciding backend="auto" (None:
            "auto" is refused like any other name that is not a backend).
    """
    choices = FIELD_BACKENDS.get(producer)
    if choices is None or "backend" not in options:
        return producer, options
    rest = {k: v for k, v in options.items() if k != "backend"}
    backend = options["backend"]
    if backend == "auto" and auto is not None:
        backend = auto(rest)
    if backend not in choices:
        raise ValueError(f"field option backend={backend!r} is not a backend of producer "
                         f"{producer!r}; choose one of {sorted(choices)}")
    return choices[backend], rest


def delivered_by_default(name: str, spec: dict) -> bool:
    """Whether a Pipeline without `fields=` delivers this field (not metadata)."""
    return KIND_PRODUCERS.get(spec["kind"]) not in NOT_BY_DEFAULT


def field_media(name: str, spec: dict) -> str | None:
    """What a field's bytes encode ("image", ...) when they are to be decoded, else None."""
    return spec.get("media") or MEDIA_OF_LEGACY_FIELDS.get((name, spec.get("kind")))


def producer_module(name: str) -> ModuleType:
    module_name = PRODUCERS.get(name)
    if module_name is None:
        choices = sorted(set(IMAGE_BACKENDS) | {"auto"})
        raise ValueError(f"unknown backend {name!r}; choose one of {choices}")
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"backend {name!r} cannot be loaded ({exc}). Install its dependencies "
            "(e.g. `pip install chute[gpu]` for the DALI backends) or use backend='cpu'."
        ) from exc


def create_producer(spec):
    """Build the producer named by `spec.name` for `spec.field`."""
    return producer_module(spec.name).create(spec)


def image_candidates(device: str) -> list:
    """What the autotuner compares for image fields: every image producer's own
    `candidates(device)`, cheapest first."""
    modules = dict.fromkeys(PRODUCERS[name] for name in IMAGE_BACKENDS)
    found = [c for m in modules for c in importlib.import_module(m).candidates(device)]
    return sorted(found, key=lambda c: c.cost)
