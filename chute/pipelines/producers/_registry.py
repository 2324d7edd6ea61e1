"""The producer registry: producer name -> module, and field family -> module (docs/design.md,
"Plans and producers"). Adding a producer is one module plus one entry here; adding a kind of
field is one family folder plus one entry in FAMILIES."""

from __future__ import annotations

import importlib
from types import ModuleType

from chute.errors import BackendUnavailableError
from chute.pipelines.producers._family import Family

__all__ = ["PRODUCERS", "IMAGE_BACKENDS", "FAMILIES", "MEDIA_OF_LEGACY_FIELDS",
           "producer_module", "create_producer", "field_media", "family_of", "image_candidates"]

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
    "video-nvdec": "chute.pipelines.producers.video._nvdec",
    "audio": "chute.pipelines.producers.audio._producer",
    "lookup": "chute.pipelines.producers.stored._lookup",
}

# The producers `ImageOptions.backend` chooses between.
IMAGE_BACKENDS = ("cpu", "dali", "dali-native", "nvimgcodec")

# Family -> module exporting FAMILY (or FAMILIES, by family name): a field's family is its media
# when its bytes are to be decoded (image, video, audio), else its kind.
FAMILIES: dict[str, str] = {
    "image": "chute.pipelines.producers.image._family",
    "video": "chute.pipelines.producers.video._family",
    "audio": "chute.pipelines.producers.audio._family",
    "ndarray": "chute.pipelines.producers.stored._family",
    "table": "chute.pipelines.producers.stored._family",
    "scalar": "chute.pipelines.producers.stored._family",
    "json": "chute.pipelines.producers.stored._family",
    "bytes": "chute.pipelines.producers.stored._family",
}

# Datasets written before fields declared their media: (field name, kind) -> media.
MEDIA_OF_LEGACY_FIELDS: dict[tuple[str, str | None], str] = {("image", "bytes"): "image"}


def field_media(name: str, spec: dict) -> str | None:
    """What a field's bytes encode ("image", ...) when they are to be decoded, else None."""
    return spec.get("media") or MEDIA_OF_LEGACY_FIELDS.get((name, spec.get("kind")))


def family_of(name: str, spec: dict) -> Family:
    """The family of field `name` (its manifest entry `spec`)."""
    key = field_media(name, spec) or spec["kind"]
    module_name = FAMILIES.get(key)
    if module_name is None:
        raise ValueError(f"field {name!r} ({key}) has no producer family; add one to "
                         "chute/pipelines/producers/_registry.py (FAMILIES)")
    return _family(key, module_name)


def _family(key: str, module_name: str) -> Family:
    module = importlib.import_module(module_name)
    found = getattr(module, "FAMILIES", None)
    return found[key] if found is not None else module.FAMILY


def _family_producer(name: str) -> str | None:
    """The module of producer `name` that a registered family lists itself (`Family.producers`),
    importing family modules until one does (a spawned process may create a producer before
    any family was looked up)."""
    for key, module_name in list(FAMILIES.items()):
        try:
            family = _family(key, module_name)
        except ImportError:  # a family whose dependencies are missing lists nothing here
            continue
        if name in family.producers:
            return family.producers[name]
    return None


def producer_module(name: str) -> ModuleType:
    module_name = PRODUCERS.get(name) or _family_producer(name)
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
