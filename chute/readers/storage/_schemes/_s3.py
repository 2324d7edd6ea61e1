"""`s3://BUCKET/PREFIX`: S3 and S3-compatible stores (MinIO, Ceph, R2) through obstore's
S3Store, configured by the standard AWS variables, then by the shared config and credentials
files (`AWS_PROFILE`, `~/.aws/config`, `~/.aws/credentials`), which obstore alone does not
read (docs/storage.md)."""

from __future__ import annotations

import configparser
import os
from pathlib import Path

from chute.errors import ChuteError
from chute.readers.storage._schemes import Scheme

__all__ = ["SCHEME"]


def _profile_settings() -> dict[str, str]:
    """Settings of the AWS profile ($AWS_PROFILE or "default") from the shared config and
    credentials files, as obstore config keys."""
    profile = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path.home() / ".aws"
    found: dict[str, str] = {}
    sources = [(os.environ.get("AWS_CONFIG_FILE") or str(home / "config"),
                profile if profile == "default" else f"profile {profile}"),
               (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or str(home / "credentials"),
                profile)]
    names = {"aws_access_key_id": "access_key_id", "aws_secret_access_key": "secret_access_key",
             "aws_session_token": "session_token", "region": "region",
             "endpoint_url": "endpoint"}
    for path, section in sources:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error as exc:
            raise ChuteError(f"{path}: not a valid AWS config file ({exc}); fix or move it") \
                from None
        if parser.has_section(section):
            for key, name in names.items():
                if parser.has_option(section, key):
                    found.setdefault(name, parser.get(section, key).strip())
    return found


def _settings(host: str) -> dict[str, str]:
    """obstore S3 settings: the AWS variables first, the profile's files for what they lack."""
    env = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY",
           "session_token": "AWS_SESSION_TOKEN", "region": "AWS_REGION",
           "endpoint": "AWS_ENDPOINT_URL"}
    config = {name: os.environ[var] for name, var in env.items() if os.environ.get(var)}
    if "region" not in config and os.environ.get("AWS_DEFAULT_REGION"):
        config["region"] = os.environ["AWS_DEFAULT_REGION"]
    if "endpoint" not in config and os.environ.get("AWS_ENDPOINT_URL_S3"):
        config["endpoint"] = os.environ["AWS_ENDPOINT_URL_S3"]
    for name, value in _profile_settings().items():
        config.setdefault(name, value)
    if "session_token" in config and "access_key_id" not in config:
        del config["session_token"]
    return config


SCHEME = Scheme(
    label="S3", form="s3://BUCKET/PREFIX", store="S3Store", settings=_settings,
    bucket=lambda host: host, endpoint_key="endpoint", default_endpoint="AWS S3",
    credentials="AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), plus "
                "AWS_ENDPOINT_URL for an S3-compatible store",
    missing_bucket=("NoSuchBucket",))
