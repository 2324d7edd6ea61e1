"""The object storage schemes (docs/storage.md, "Schemes"): each URL form reaches its obstore
store with the provider's standard variables, an emulator's variables point it at the
emulator, and a URL chute cannot read says which forms it takes. No server is asked here;
tests/readers/storage/test_scheme_contract.py runs the storage contract against servers."""

from __future__ import annotations

import pytest

from chute.errors import ChuteError
from chute.readers import is_remote
from chute.readers.storage._object_store import REMOTE_SCHEMES, Remote
from chute.readers.storage._schemes import SCHEMES

_PROVIDER_VARS = ("GOOGLE_", "AZURE_", "STORAGE_EMULATOR_HOST", "AZURITE_")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    import os

    for var in list(os.environ):
        if var.startswith(_PROVIDER_VARS):
            monkeypatch.delenv(var)


def test_every_scheme_is_a_remote_url_with_its_own_store():
    assert {"s3", "gs", "az", "abfs"} <= set(REMOTE_SCHEMES)
    for url, store, bucket, prefix in [
            ("s3://b/x/y", "S3Store", "b", "x/y"), ("gs://b/x", "GCSStore", "b", "x"),
            ("az://c/x/", "AzureStore", "c", "x"),
            ("abfs://c@acct.dfs.core.windows.net/x", "AzureStore", "c", "x")]:
        remote = Remote(url)
        assert is_remote(url) and remote.scheme.store == store
        assert (remote.bucket, remote.prefix) == (bucket, prefix)
        assert remote.where("a") == url.rstrip("/") + "/a"  # the URL as the user wrote it
    assert not is_remote("s4://b/x") and not is_remote("/data/x")


def test_an_unknown_scheme_lists_every_form_chute_takes():
    with pytest.raises(ChuteError) as info:
        Remote("s4://b/x")
    message = str(info.value)
    for form in ("s3://BUCKET/PREFIX", "gs://BUCKET/PREFIX", "az://CONTAINER/PREFIX"):
        assert form in message
    from chute.readers.storage._storage import local_path

    with pytest.raises(ChuteError, match="gs://.*az://.*abfs://"):
        local_path("s4://b/x")


def test_gcs_settings_come_from_the_google_variables(monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/adc.json")
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", '{"type": "service_account"}')
    config = Remote("gs://b/x").settings()
    assert config == {"application_credentials": "/keys/adc.json",
                      "service_account_key": '{"type": "service_account"}'}
    assert Remote("gs://b/x").endpoint() == "Google Cloud Storage"


def test_a_gcs_emulator_gets_its_address_and_a_static_token(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")
    remote = Remote("gs://b/x")
    assert remote.settings() == {"base_url": "http://127.0.0.1:4443", "bearer_token": "emulator"}
    assert remote.endpoint() == "http://127.0.0.1:4443"
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", "/keys/sa.json")  # real credentials win
    assert "bearer_token" not in remote.settings()
    monkeypatch.setenv("GOOGLE_BASE_URL", "https://gcs.internal")  # an explicit URL wins
    assert remote.settings()["base_url"] == "https://gcs.internal"


def test_gcs_conditional_updates_compare_generations():
    assert SCHEMES["gs"].tag_key == "version"
    assert SCHEMES["s3"].tag_key == SCHEMES["az"].tag_key == "e_tag"


def test_azure_settings_come_from_the_azure_variables(monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "a2V5")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "sv=2024&sig=x")
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", "http://127.0.0.1:10000/acct")
    remote = Remote("az://c/x")
    assert remote.settings() == {"account_name": "acct", "account_key": "a2V5",
                                 "sas_key": "sv=2024&sig=x",
                                 "endpoint": "http://127.0.0.1:10000/acct"}
    assert remote.endpoint() == "http://127.0.0.1:10000/acct"
    # an abfs URL names its account, which wins over the variable
    assert Remote("abfs://c@other.dfs.core.windows.net/x").settings()["account_name"] == "other"


def test_azurite_is_chosen_by_the_emulator_variable(monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    assert Remote("az://c/x").settings() == {"use_emulator": True}
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "0")
    assert Remote("az://c/x").settings() == {}


def test_a_malformed_abfs_host_is_one_line_saying_what_to_write():
    with pytest.raises(ChuteError, match="abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX"):
        Remote("abfs://@acct.dfs.core.windows.net/x")


def test_each_scheme_names_its_own_credentials_and_bucket():
    assert "AWS_ACCESS_KEY_ID" in SCHEMES["s3"].credentials
    assert "GOOGLE_APPLICATION_CREDENTIALS" in SCHEMES["gs"].credentials
    assert "AZURE_STORAGE_ACCOUNT_KEY" in SCHEMES["abfs"].credentials
    assert SCHEMES["az"].holder == "container" and SCHEMES["gs"].holder == "bucket"


def test_the_stores_are_built_from_those_settings(monkeypatch):
    pytest.importorskip("obstore", reason="the object storage client is chute[s3]")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "a2V5")
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", "http://127.0.0.1:10000/acct")
    for url, store in [("gs://b/x", "GCSStore"), ("az://c/x", "AzureStore"),
                       ("abfs://c@acct.dfs.core.windows.net/x", "AzureStore")]:
        built = Remote(url).store  # no request is made: the settings are only checked
        assert type(built).__name__ == store and built.prefix == "x"
