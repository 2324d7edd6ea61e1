"""The CLI on a dataset in object storage (issue 23 item 1), against moto's S3 server on
loopback: convert writes it there, info, verify and bench read it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chute import cli
from tests._media import jpeg


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
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


@pytest.mark.slow
def test_a_second_convert_to_the_same_url_in_another_process_fails_in_one_line(s3, tmp_path):
    from chute.convert import ShardWriter
    from chute.readers import open_dataset

    server, bucket = s3
    src = tmp_path / "src"
    (src / "c0").mkdir(parents=True)
    for i in range(4):
        (src / "c0" / f"{i}.jpg").write_bytes(jpeg(40, 48, seed=i))
    url = f"{bucket}/train"
    first = ShardWriter(url, {"image": "bytes", "label": "int64"}, shard_size="4KB")
    first.write({"image": b"x" * 5000, "label": 0})  # a shard uploaded: a write under way
    run = subprocess.run([sys.executable, "-c", "import sys; from chute import cli; "
                          "sys.exit(cli.main(sys.argv[1:]))", "convert", "imagefolder",
                          str(src), url, "--overwrite", "--no-progress", "--workers", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "another writer (pid" in lines[0] and url in lines[0]
    first.write({"image": b"y" * 5000, "label": 1})
    first.close()
    ds = open_dataset(url, cache_dir=tmp_path / "c")
    assert [bytes(ds[i]["image"]) for i in range(2)] == [b"x" * 5000, b"y" * 5000]
