"""URLs on the command line: `s3://` (`gs://`, `az://`, `abfs://`) is a dataset in object
storage (tests/readers/storage), anything else but file:// is refused before anything is
written (`chute convert ... s3://bucket/x` used to write a local folder named "s3:" and exit 0),
and so is `s3://` where a command needs a local path."""

from __future__ import annotations

import pytest

from chute import cli
from tests._media import jpeg


@pytest.fixture
def images(tmp_path):
    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "a.jpg").write_bytes(jpeg(16, 16))
    return tmp_path / "src"


@pytest.mark.parametrize("argv, said", [
    (["convert", "imagefolder", "hdfs://nn/src", "{tmp}/out"],
     "scheme 'hdfs' is not supported (chute reads local folders, file://, s3://, gs://, az://"),
    (["convert", "imagefolder", "{src}", "hdfs://nn/x"],
     "cannot write to storage scheme 'hdfs' (chute writes local folders, file://, s3://, gs://"),
    (["info", "hdfs://nn/x"], "scheme 'hdfs' is not supported"),
    (["convert", "imagefolder", "gs://bucket/src", "{tmp}/out"],
     "is in object storage, not a local folder"),
    (["meta", "update", "s3://bucket/x", "{tmp}/m.jsonl"],
     "is in object storage, not a local folder"),
])
def test_the_cli_refuses_urls_in_one_line_and_creates_nothing(images, tmp_path, monkeypatch,
                                                               capsys, argv, said):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code = cli.main([a.format(src=images, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code in (1, 2) and said in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_s3_without_credentials_is_one_clear_line(images, tmp_path, monkeypatch, capsys):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE",
                "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "2")
    # the instance metadata service is not reachable here: no credentials at all, or the
    # endpoint cannot be reached; either way one line naming the URL, within the deadline
    code = cli.main(["convert", "imagefolder", str(images), "s3://bucket/x", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "s3://bucket/x" in err and len(err.strip().splitlines()) == 1, err
    assert "credentials" in err or "reachable" in err
    assert not (tmp_path / "s3:").exists()
