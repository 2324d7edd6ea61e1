"""`chute meta update` on a video dataset keeps the `text` field (batch["text"]) and the
metadata's "text" (the same caption, stored twice by `chute convert video`) in step, in one
switch-over (new-user trial: the field kept the converted caption; docs/video.md); an audio
dataset's transcripts live in its metadata alone, so batches follow an update."""

from __future__ import annotations

import json

import pytest

from chute.cli import main
from chute.convert import update_metadata
from chute.pipelines import AudioOptions, Pipeline, VideoOptions
from chute.readers import open_dataset
from tests._video_media import convert_videos, make_video

OPTS = VideoOptions(num_frames=2, frame_interval=1, size=None)


@pytest.fixture
def videos(tmp_path):
    pytest.importorskip("av")
    # shard_size 2KB: several shards, so the new generations span more than one folder
    return convert_videos(tmp_path, [(f"v{k}.mp4", make_video(n=6, height=32, width=48))
                                     for k in range(4)], shard_size="2KB")


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _captions(folder) -> dict[str, str | None]:
    """key -> batch["text"] of one epoch through a Pipeline, after checking that it agrees
    with the metadata's "text"."""
    with Pipeline(folder, 4, augment="eval", device="cpu",
                  fields={"video": OPTS, "text": None, "meta": None}) as pipe:
        batch = next(iter(pipe))
    for text, meta in zip(batch["text"], batch["meta"], strict=True):
        assert text == meta.get("text"), (text, meta)
    return {meta["key"]: text for text, meta in zip(batch["text"], batch["meta"], strict=True)}


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_update_changes_the_caption_a_pipeline_delivers(tmp_path, videos, capsys):
    assert len(open_dataset(videos).manifest["shards"]) > 1
    updates = _jsonl(tmp_path / "u.jsonl", [{"key": "v2.mp4", "text": "a better caption"}])
    assert main(["meta", "update", str(videos), str(updates), "--merge"]) == 0
    assert "field 'text' rewritten" in capsys.readouterr().out
    assert _captions(videos) == {"v0.mp4": "clip 0", "v1.mp4": "clip 1",
                                 "v2.mp4": "a better caption", "v3.mp4": "clip 3"}
    specs = open_dataset(videos).specs
    assert specs["text"]["file"] == "text.1" and specs["meta"]["file"] == "meta.1"
    assert not list(videos.glob("*/text.bin"))  # the old generation is removed
    assert main(["verify", str(videos), "--no-progress"]) == 0


def test_replacing_the_metadata_without_a_caption_leaves_none(tmp_path, videos):
    # replace (no --merge): the record is the whole metadata, so the sample has no caption,
    # as a video converted without one
    update_metadata(videos, _jsonl(tmp_path / "u.jsonl", [{"key": "v1.mp4", "score": 3}]))
    captions = _captions(videos)
    assert captions["v1.mp4"] is None and captions["v0.mp4"] == "clip 0"


def test_an_update_that_keeps_the_captions_leaves_the_text_field(tmp_path, videos):
    text_files = {p: p.read_bytes() for p in videos.glob("*/text.*")}
    result = update_metadata(videos, _jsonl(tmp_path / "u.jsonl",
                                            [{"key": "v1.mp4", "score": 3},
                                             {"key": "v3.mp4", "text": "clip 3"}]), merge=True)
    assert result.mirrored == []
    ds = open_dataset(videos)
    assert "file" not in ds.specs["text"] and ds.specs["meta"]["file"] == "meta.1"
    assert {p: p.read_bytes() for p in videos.glob("*/text.*")} == text_files
    assert ds[1]["meta"]["score"] == 3 and _captions(videos)["v1.mp4"] == "clip 1"


@pytest.mark.parametrize("where", ["text", "manifest"])
def test_an_interrupted_update_keeps_the_old_captions_in_both(tmp_path, videos, monkeypatch,
                                                              where):
    """`text`: the metadata's new generation is written and the caption field's fails;
    `manifest`: both are written and the switch-over fails."""
    from chute.convert import _meta_update

    before = _tree(videos)
    if where == "text":
        real = _meta_update._write_generation

        def failing(ds, manifest, kind, field, *args):
            if field == "text":
                raise KeyboardInterrupt
            return real(ds, manifest, kind, field, *args)

        monkeypatch.setattr(_meta_update, "_write_generation", failing)
    else:
        def failing_manifest(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(_meta_update, "write_manifest", failing_manifest)
    updates = _jsonl(tmp_path / "u.jsonl", [{"key": "v2.mp4", "text": "a better caption"}])
    with pytest.raises(KeyboardInterrupt):
        update_metadata(videos, updates, merge=True)
    monkeypatch.undo()
    assert _tree(videos) == before  # no new generation left behind
    assert _captions(videos)["v2.mp4"] == "clip 2"
    assert main(["verify", str(videos), "--no-progress"]) == 0
    update_metadata(videos, updates, merge=True)  # the next update goes through
    assert _captions(videos)["v2.mp4"] == "a better caption"


def test_an_audio_update_changes_the_transcripts_batches_carry(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from tests._audio import convert_recordings, segments_of

    folder = convert_recordings(tmp_path, names=("a.wav", "b.flac"))
    assert set(open_dataset(folder).fields).isdisjoint({"text", "txt"})  # meta holds them
    new = [{**seg, "txt": f"new {k}"} for k, seg in enumerate(segments_of("b.flac"))]
    updates = _jsonl(tmp_path / "u.jsonl", [{"key": "b.flac", "segments": new}])
    assert main(["meta", "update", str(folder), str(updates), "--merge"]) == 0
    with Pipeline(folder, 6, augment="eval", device="cpu", fields={
            "audio": AudioOptions(unit="segment", sample_rate=16000)}) as pipe:
        segments = [seg for batch in pipe for seg in batch["audio_segment"]]
    texts = {(seg["recording_key"], seg["index"]): seg["txt"] for seg in segments}
    assert len(texts) == 6
    for k, seg in enumerate(segments_of("a.wav")):
        assert texts["a.wav", k] == seg["txt"]
    for k in range(3):
        assert texts["b.flac", k] == f"new {k}"


def test_the_next_update_removes_caption_files_a_killed_update_left(tmp_path, videos):
    shard = sorted(p for p in videos.iterdir() if p.is_dir())[0]
    (shard / ".text.1.bin.tmp-4242").write_bytes(b"x" * 10)
    (shard / "text.1.idx").write_bytes(b"stale")
    update_metadata(videos, _jsonl(tmp_path / "u.jsonl", [{"key": "v0.mp4", "text": "new"}]),
                    merge=True)
    assert not (shard / ".text.1.bin.tmp-4242").exists()
    listed = {n for s in open_dataset(videos).manifest["shards"] for n in s["files"]}
    assert {p.name for p in shard.iterdir()} <= listed
    assert _captions(videos)["v0.mp4"] == "new"
    assert main(["verify", str(videos), "--no-progress"]) == 0
