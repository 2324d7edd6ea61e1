"""Until object storage lands, a URL other than file:// is refused before anything is written:
`chute convert ... s3://bucket/x` used to write a local folder named "s3:" and exit 0."""

from __future__ import annotations

import pytest

from chute import cli
from chute.readers import ShardWriter, convert_imagefolder
from chute.readers.convert._convert import ConvertOptions
from tests._media import jpeg


@pytest.fixture
def images(tmp_path):
    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "a.jpg").write_bytes(jpeg(16, 16))
    return tmp_path / "src"


@pytest.mark.parametrize("argv, said", [
    (["convert", "imagefolder", "{src}", "s3://bucket/x"], "cannot write to storage scheme 's3'"),
    (["convert", "imagefolder", "gs://bucket/src", "{tmp}/out"], "scheme 'gs' is not supported"),
    (["info", "s3://bucket/x"], "scheme 's3' is not supported"),
])
def test_the_cli_refuses_urls_in_one_line_and_creates_nothing(images, tmp_path, monkeypatch,
                                                               capsys, argv, said):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code = cli.main([a.format(src=images, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 1 and said in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_library_refuses_a_url_destination(images, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="cannot write to storage scheme 's3'"):
        convert_imagefolder(images, "s3://bucket/x", ConvertOptions(progress=False))
    with pytest.raises(ValueError, match="cannot write to storage scheme 's3'"):
        ShardWriter("s3://bucket/y", {"label": "int64"})
    assert not (tmp_path / "s3:").exists()
