"""`backend="auto"` in a field's options (e.g. field_options={"video": {"backend": "auto"}}):
which of the producer's backends (`FIELD_BACKENDS`) fills the field.

As for images (`_resolve.py`), choosing by measurement is the autotuner's job and pipelines do
not import it: chute/_auto_backend.py registers a resolver per producer; without one, "auto"
means the producer's own backend ("cpu"), said so in the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["FieldResolver", "register_field_resolver", "resolve_field_backend"]

log = logging.getLogger("chute")

# Called with keyword arguments dataset, field, options (the field's options without
# `backend`), device (str), batch_size, augment; returns (backend, reason).
FieldResolver = Callable[..., tuple[str, str]]

_resolvers: dict[str, FieldResolver] = {}


def register_field_resolver(producer: str, resolver: FieldResolver | None
                            ) -> FieldResolver | None:
    """Make `resolver` decide backend="auto" for fields of `producer` from now on.

    Args:
        producer: the producer whose field option `backend` it decides (e.g. "video").
        resolver: see FieldResolver; None unregisters.

    Returns:
        The resolver registered before.
    """
    previous = _resolvers.pop(producer, None)
    if resolver is not None:
        _resolvers[producer] = resolver
    return previous


def resolve_field_backend(producer: str, **request) -> tuple[str, str]:
    """(backend, reason) for a field of `producer` whose options say backend="auto".

    Args:
        producer: the field's producer ("video").
        **request: dataset, field, options, device, batch_size, augment.
    """
    resolver = _resolvers.get(producer)
    if resolver is None:
        return "cpu", ("cpu without measuring: no autotuner is registered (chute.Pipeline "
                       "registers it; chute.pipelines.Pipeline does not)")
    backend, reason = resolver(**request)
    log.info("field %r: backend='auto' chose %s: %s", request.get("field"), backend, reason)
    return backend, reason
