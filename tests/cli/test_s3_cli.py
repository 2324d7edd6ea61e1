"""The CLI on a dataset in object storage (issue 23 item 1), against moto's S3 server on
loopback: convert writes it there, info, verify and bench read it."""

from __future__ import annotations

import json

from chute import cli
from tests._media import jpeg


def test_convert_info_verify_and_bench_on_s3(s3, tmp_path, capsys):
    server, bucket = s3
    src = tmp_path / "src"
    for c in range(2):
        (src / f"c{c}").mkdir(parents=True)
        for i in range(6):
            (src / f"c{c}" / f"{i}.jpg").write_bytes(jpeg(40, 48, seed=10 * c + i))
    (src / "c0" / "broken.jpg").write_bytes(b"not a jpeg")
    url = f"{bucket}/train"
    assert cli.main(["convert", "imagefolder", str(src), url, "--no-progress",
                     "--shard-size", "4KB", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert f"to {url}" in out
    assert cli.main(["info", url, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["path"] == url and info["samples"] == 12 and info["shards"] > 1
    assert cli.main(["verify", url]) == 0
    assert "OK, every checksum matches" in capsys.readouterr().out
    from chute.readers.storage._object_store import Remote

    report = Remote(url).get_bytes("skipped.tsv").decode()
    assert "broken.jpg" in report  # the skipped report lies beside the manifest
    assert cli.main(["bench", url, "--backend", "cpu", "--batch-size", "4", "--epochs", "1",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dataset"] == url
