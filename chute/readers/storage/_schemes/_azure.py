"""`az://CONTAINER/PREFIX` and `abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX`: Azure
Blob Storage (and ADLS Gen2) through obstore's AzureStore, configured by the standard Azure
variables (docs/storage.md): the account (`AZURE_STORAGE_ACCOUNT_NAME`, or the abfs URL's
host) with `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_TOKEN`, `AZURE_STORAGE_TOKEN` or a
service principal (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, `AZURE_TENANT_ID`); an endpoint
override with `AZURE_STORAGE_ENDPOINT`, and `AZURE_STORAGE_USE_EMULATOR=true` for Azurite
(at `AZURITE_BLOB_STORAGE_URL`, default http://127.0.0.1:10000). Without credentials, the
instance's managed identity is asked (on Azure)."""

from __future__ import annotations

import os
from typing import Any

from chute.errors import ChuteError
from chute.readers.storage._schemes import Scheme, from_environment

__all__ = ["SCHEME"]

_VARIABLES = (("account_name", ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT")),
              ("account_key", ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY",
                               "AZURE_STORAGE_MASTER_KEY")),
              ("sas_key", ("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY")),
              ("token", ("AZURE_STORAGE_TOKEN",)),
              ("client_id", ("AZURE_STORAGE_CLIENT_ID", "AZURE_CLIENT_ID")),
              ("client_secret", ("AZURE_STORAGE_CLIENT_SECRET", "AZURE_CLIENT_SECRET")),
              ("tenant_id", ("AZURE_STORAGE_TENANT_ID", "AZURE_TENANT_ID")),
              ("federated_token_file", ("AZURE_FEDERATED_TOKEN_FILE",)),
              ("endpoint", ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")))
_TRUE = ("1", "true", "yes")


def _split(host: str) -> tuple[str, str | None]:
    """(container, account or None) of a URL's host part: `container` or
    `container@account.dfs.core.windows.net` (also `.blob.`)."""
    container, at, rest = host.partition("@")
    if not at:
        return host, None
    account = rest.split(".", 1)[0]
    if not container or not account:
        raise ChuteError(f"{host}: not an Azure container; write "
                         "abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX or "
                         "az://CONTAINER/PREFIX with AZURE_STORAGE_ACCOUNT_NAME set")
    return container, account


def _settings(host: str) -> dict[str, Any]:
    """obstore Azure settings from the environment (first variable found wins) and the URL."""
    config: dict[str, Any] = from_environment(_VARIABLES)
    account = _split(host)[1]
    if account is not None:
        config["account_name"] = account  # the URL names it: it wins over the environment
    if os.environ.get("AZURE_STORAGE_USE_EMULATOR", "").strip().lower() in _TRUE:
        config["use_emulator"] = True
    return config


SCHEME = Scheme(
    label="Azure Blob Storage", form="az://CONTAINER/PREFIX", store="AzureStore",
    settings=_settings, bucket=lambda host: _split(host)[0], endpoint_key="endpoint",
    default_endpoint="Azure Blob Storage",
    credentials="AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or "
                "AZURE_STORAGE_SAS_TOKEN (or AZURE_CLIENT_ID/AZURE_CLIENT_SECRET/"
                "AZURE_TENANT_ID), plus AZURE_STORAGE_ENDPOINT or AZURE_STORAGE_USE_EMULATOR "
                "for an emulator",
    missing_bucket=("ContainerNotFound",), holder="container")
