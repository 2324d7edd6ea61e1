"""`update_metadata` (chute/convert/_meta_update.py) on hostile or interrupted input: a record
nested 100,000 deep or a file that is not UTF-8 is one line naming the file and line (issue
37: RecursionError, UnicodeDecodeError), and the files an update killed right after its
switch-over left (the first generation's `meta.bin`/`.idx`) are removed by the next one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chute.convert import ShardWriter, update_metadata
from chute.errors import ChuteError
from chute.readers import open_dataset, verify_dataset


@pytest.fixture
def dataset(tmp_path) -> Path:
    with ShardWriter(tmp_path / "d.chute", {"meta": "json", "label": "int64"},
                     shard_size=64) as writer:
        for i in range(6):
            writer.write({"meta": {"key": f"k{i}", "text": f"t{i}"}, "label": i})
    return tmp_path / "d.chute"


def _unlisted(root: Path) -> list[str]:
    manifest = open_dataset(root).manifest
    return sorted(f"{s['name']}/{p.name}" for s in manifest["shards"]
                  for p in (root / s["name"]).iterdir() if p.name not in s["files"])


@pytest.mark.parametrize(("content", "message"), [
    (b'{"key": "k1"}\n{"key": "k2", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
     ":2: JSON nested too deeply to read (more than about a thousand levels); flatten the "
     "record"),
    (b'{"key": "k1"}\n{"key": "k2"}\n{"key": "caf\xe9"}\n',
     ":3: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
])
def test_a_record_too_deep_or_not_utf8_is_one_line_and_writes_nothing(tmp_path, dataset,
                                                                       content, message):
    (tmp_path / "u.jsonl").write_bytes(content)
    before = open_dataset(dataset).manifest
    with pytest.raises(ChuteError) as exc:
        update_metadata(dataset, tmp_path / "u.jsonl")
    assert str(exc.value) == f"{tmp_path / 'u.jsonl'}{message}"
    assert open_dataset(dataset).manifest == before and _unlisted(dataset) == []


def test_the_files_an_update_killed_after_its_switch_left_go_with_the_next(tmp_path, dataset,
                                                                          monkeypatch):
    updates = tmp_path / "u.jsonl"
    updates.write_text(json.dumps({"key": "k1", "text": "new"}) + "\n")
    unlink = Path.unlink

    def killed(self, missing_ok=False):  # the process dies as the old files go
        if self.name.startswith("meta.") and self.name.count(".") == 1:
            raise KeyboardInterrupt
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", killed)
    with pytest.raises(KeyboardInterrupt):
        update_metadata(dataset, updates)
    monkeypatch.setattr(Path, "unlink", unlink)
    assert open_dataset(dataset)[1]["meta"] == {"key": "k1", "text": "new"}  # switched
    assert "meta.bin" in " ".join(_unlisted(dataset))
    updates.write_text(json.dumps({"key": "k2", "text": "newer"}) + "\n")
    update_metadata(dataset, updates)
    assert _unlisted(dataset) == []
    ds = open_dataset(dataset)
    assert [ds[i]["meta"]["text"] for i in range(6)] == ["t0", "new", "newer", "t3", "t4", "t5"]
    assert verify_dataset(dataset) == []
