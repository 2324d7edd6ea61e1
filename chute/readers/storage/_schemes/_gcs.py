"""`gs://BUCKET/PREFIX`: Google Cloud Storage through obstore's GCSStore, configured by the
standard Google variables (docs/storage.md): a service account (`GOOGLE_SERVICE_ACCOUNT`,
`GOOGLE_SERVICE_ACCOUNT_KEY`), application default credentials
(`GOOGLE_APPLICATION_CREDENTIALS`), a static `GOOGLE_BEARER_TOKEN`; an endpoint override with
`GOOGLE_BASE_URL`, or `STORAGE_EMULATOR_HOST` for an emulator (Google's client libraries read
the same variable). Without any, the instance's metadata server is asked (on GCE)."""

from __future__ import annotations

import os

from chute.readers.storage._schemes import Scheme, from_environment

__all__ = ["SCHEME"]

_VARIABLES = (("service_account", ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH")),
              ("service_account_key", ("GOOGLE_SERVICE_ACCOUNT_KEY",)),
              ("application_credentials", ("GOOGLE_APPLICATION_CREDENTIALS",)),
              ("bearer_token", ("GOOGLE_BEARER_TOKEN",)),
              ("base_url", ("GOOGLE_BASE_URL", "STORAGE_EMULATOR_HOST")))
_CREDENTIALS = ("service_account", "service_account_key", "application_credentials",
                "bearer_token")


def _settings(host: str) -> dict[str, str]:
    """obstore GCS settings from the environment, first variable found wins."""
    config: dict[str, str] = from_environment(_VARIABLES)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator and not emulator.startswith(("http://", "https://")):
        emulator = f"http://{emulator}"  # the variable is a host:port for Google's libraries
    if emulator and "GOOGLE_BASE_URL" not in os.environ:
        config["base_url"] = emulator
    if emulator and not any(key in config for key in _CREDENTIALS):
        # an emulator checks no token: a static one keeps the client from asking the
        # instance metadata server, which is not there
        config["bearer_token"] = "emulator"
    return config


SCHEME = Scheme(
    label="Google Cloud Storage", form="gs://BUCKET/PREFIX", store="GCSStore",
    settings=_settings, bucket=lambda host: host, endpoint_key="base_url",
    default_endpoint="Google Cloud Storage",
    credentials="GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT / "
                "GOOGLE_SERVICE_ACCOUNT_KEY), plus STORAGE_EMULATOR_HOST for an emulator",
    missing_bucket=("NoSuchBucket", "bucket does not exist"), tag_key="version")
