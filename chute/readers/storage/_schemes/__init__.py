"""The object storage schemes chute reads and writes (docs/storage.md): each is one module
naming its obstore store, where its settings come from (the provider's standard variables),
and how its errors read; adding a scheme is one module and one entry in `SCHEMES`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Scheme", "SCHEMES", "scheme_of", "url_forms", "from_environment"]


@dataclass(frozen=True)
class Scheme:
    """How chute reaches one kind of object storage through obstore.

    Args:
        label: the provider, as messages name it ("S3", "Google Cloud Storage", ...).
        form: the URL a user writes, e.g. "s3://BUCKET/PREFIX".
        store: the obstore store class (a name in `obstore.store`).
        settings: the URL's host part (a bucket, or container@account) -> the store's config:
            the environment's settings, then those of shared files.
        bucket: the URL's host part -> the bucket or container name the store is made for.
        endpoint_key: the config key of an endpoint override (emulators, compatible stores).
        default_endpoint: what messages name when no endpoint is overridden.
        credentials: the variables a user checks when access is denied (one phrase).
        missing_bucket: error codes the provider answers for a bucket that does not exist.
        tag_key: the metadata key a conditional update compares (an ETag, or a GCS object's
            generation: GCS's If-Match is on generations).
        holder: what the provider calls a bucket ("bucket", "container").
    """

    label: str
    form: str
    store: str
    settings: Callable[[str], dict[str, Any]]
    bucket: Callable[[str], str]
    endpoint_key: str
    default_endpoint: str
    credentials: str
    missing_bucket: tuple[str, ...]
    tag_key: str = "e_tag"
    holder: str = "bucket"


def from_environment(variables: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, Any]:
    """Store settings from the environment: for each (config key, its variables), the value
    of the first variable set.

    Args:
        variables: (obstore config key, the variables that give it, first wins) pairs.
    """
    config: dict[str, Any] = {}
    for name, names in variables:
        value = next((os.environ[var] for var in names if os.environ.get(var)), None)
        if value is not None:
            config[name] = value
    return config


def _registry() -> dict[str, Scheme]:
    from chute.readers.storage._schemes import _azure, _gcs, _s3

    return {"s3": _s3.SCHEME, "gs": _gcs.SCHEME, "az": _azure.SCHEME, "abfs": _azure.SCHEME,
            "abfss": _azure.SCHEME}


SCHEMES: dict[str, Scheme] = _registry()


def scheme_of(name: str) -> Scheme | None:
    """The scheme of URL scheme `name` ("s3", "gs", ...); None for an unknown one."""
    return SCHEMES.get(name)


def url_forms() -> str:
    """The URL forms chute takes, for messages: "s3://BUCKET/PREFIX, gs://... or ..."."""
    forms = list(dict.fromkeys(scheme.form for scheme in SCHEMES.values()))
    return ", ".join(forms[:-1]) + f" or {forms[-1]}"
