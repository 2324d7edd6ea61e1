import json

import pytest

from chute.cli import main
from chute.readers import open_dataset
from tests.readers._images import converted_imagefolder


@pytest.fixture
def dataset(tmp_path):
    return converted_imagefolder(tmp_path)


def payload_state(root):
    """bytes and mtime of every payload-side file (everything but metadata and manifest)."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in root.glob("*/*") if not p.name.startswith("meta")}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_update_replaces_metadata_only(tmp_path, dataset, capsys):
    before = open_dataset(dataset)
    old_meta = [before[i]["meta"] for i in range(len(before))]
    state = payload_state(dataset)
    updates = write_jsonl(tmp_path / "new.jsonl", [
        {"key": "cat/c1.jpg", "caption": "a better caption"},
        {"key": "dog/sub/d2.JPEG", "caption": "a dog", "tags": ["x"]},
    ])
    assert main(["meta", "update", str(dataset), str(updates)]) == 0
    assert "updated the metadata of 2 samples" in capsys.readouterr().out
    assert payload_state(dataset) == state
    after = open_dataset(dataset)
    assert after.fingerprint != before.fingerprint
    for i in range(len(after)):
        meta = after[i]["meta"]
        if meta["key"] == "cat/c1.jpg":
            assert meta == {"key": "cat/c1.jpg", "caption": "a better caption"}
        elif meta["key"] == "dog/sub/d2.JPEG":
            assert meta["tags"] == ["x"]
        else:
            assert meta == old_meta[i]
        assert after[i]["image"].tobytes() == before[i]["image"].tobytes()
    assert not list(dataset.glob("*/meta.bin"))  # old generation removed
    assert main(["verify", str(dataset), "--no-progress"]) == 0


def test_second_update_and_merge(tmp_path, dataset):
    first = write_jsonl(tmp_path / "a.jsonl", [{"key": "cat/c0.jpg", "caption": "one"}])
    second = write_jsonl(tmp_path / "b.jsonl", [{"key": "cat/c0.jpg", "score": 3}])
    assert main(["meta", "update", str(dataset), str(first)]) == 0
    assert main(["meta", "update", str(dataset), str(second), "--merge"]) == 0
    ds = open_dataset(dataset)
    meta = next(ds[i]["meta"] for i in range(len(ds)) if ds[i]["meta"]["key"] == "cat/c0.jpg")
    assert meta == {"key": "cat/c0.jpg", "caption": "one", "score": 3}
    assert ds.manifest["fields"]["meta"]["file"] == "meta.2"


def test_unmatched_keys(tmp_path, dataset, capsys):
    updates = write_jsonl(tmp_path / "u.jsonl", [{"key": "cat/c0.jpg", "x": 1},
                                                 {"key": "nope.jpg", "x": 2}])
    manifest_before = (dataset / "chute.json").read_bytes()
    assert main(["meta", "update", str(dataset), str(updates)]) == 1
    assert "nope.jpg" in capsys.readouterr().err
    assert (dataset / "chute.json").read_bytes() == manifest_before
    assert main(["meta", "update", str(dataset), str(updates), "--allow-unmatched"]) == 0


@pytest.mark.parametrize("content, message", [
    ('{"caption": "no key"}\n', "needs a JSON object"),
    ("not json\n", "not valid JSON"),
    ('{"key": "cat/c0.jpg"}\n{"key": "cat/c0.jpg"}\n', "appears twice"),
])
def test_bad_jsonl(tmp_path, dataset, capsys, content, message):
    (tmp_path / "bad.jsonl").write_text(content)
    assert main(["meta", "update", str(dataset), str(tmp_path / "bad.jsonl")]) == 1
    assert message in capsys.readouterr().err



def test_a_metadata_field_whose_name_has_a_dot_gets_new_generations(tmp_path):
    import json

    from chute.convert import ShardWriter, update_metadata
    from chute.readers import open_dataset

    with ShardWriter(tmp_path / "d", {"meta.v2": "json", "label": "int64"}) as w:
        for i in range(3):
            w.write({"meta.v2": {"key": f"k{i}"}, "label": i})
    updates = tmp_path / "u.jsonl"
    for generation in (1, 2):
        updates.write_text(json.dumps({"key": "k1", "text": f"g{generation}"}) + "\n")
        update_metadata(tmp_path / "d", updates, field="meta.v2")
        ds = open_dataset(tmp_path / "d")
        assert ds.specs["meta.v2"]["file"] == f"meta.v2.{generation}"
        assert ds[1]["meta.v2"] == {"key": "k1", "text": f"g{generation}"}


def test_update_lists_the_segments_it_drops_and_strict_refuses(tmp_path, capsys):
    # issue 27 item 13: segments past the end of their recording are checked as convert does
    pytest.importorskip("soundfile")
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path, names=("d.wav",))  # 0.7 s
    lines = tmp_path / "u.jsonl"
    lines.write_text(json.dumps({"key": "d.wav", "segments": [
        {"start": 0.0, "end": 0.5}, {"start": 0.5, "end": 0.9}]}) + "\n")
    assert main(["meta", "update", str(folder), str(lines), "--strict"]) == 1
    assert "d.wav#segment1: ends at 0.9 s, past the end" in capsys.readouterr().err
    assert main(["meta", "update", str(folder), str(lines)]) == 0
    out = capsys.readouterr().out
    assert "dropped 1 segments" in out and "d.wav#segment1: ends at 0.9 s" in out
    assert open_dataset(folder)[0]["meta"]["segments"] == [{"start": 0.0, "end": 0.5}]
    assert main(["meta", "update", str(folder), str(lines), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dropped_segments"] == [
        {"segment": "d.wav#segment1",
         "reason": "ends at 0.9 s, past the end of the recording (0.700000 s)"}]
