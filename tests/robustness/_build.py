"""The small datasets the robustness suite mutates, and how a Pipeline reads each: every
delivered sample is compared with what the unmutated dataset delivers for the same index."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute import AudioOptions, ImageOptions, Lookup, VideoOptions
from chute._sample_images import synthetic_jpeg
from chute.convert import ShardWriter


def _images(root: Path, n: int = 12) -> Path:
    rng = np.random.default_rng(5)
    fields = {"image": {"kind": "bytes", "media": "image"}, "label": "int64",
              "height": "int32", "width": "int32", "meta": "json"}
    with ShardWriter(root, fields, shard_size="2KiB", class_names=["a", "b", "c"]) as w:
        for i in range(n):
            height, width = (int(v) for v in rng.integers(16, 40, size=2))
            w.write({"image": synthetic_jpeg(rng, height, width), "label": i % 3,
                     "height": height, "width": width, "meta": {"key": f"k{i}", "i": i}})
    return root


def _ndarrays(root: Path, n: int = 12) -> Path:
    rng = np.random.default_rng(6)
    fields = {"latent": "ndarray", "label": "int64", "meta": "json",
              "rag": {"kind": "ndarray", "ragged": True, "compression": "zstd"}}
    with ShardWriter(root, fields, shard_size=400,
                     tables={"emb": rng.standard_normal((4, 3)).astype(np.float32)}) as w:
        for i in range(n):
            w.write({"latent": rng.standard_normal((2, 3, 4)).astype(np.float16),
                     "rag": rng.standard_normal((int(rng.integers(1, 5)), 3)).astype(np.float32),
                     "label": i % 4, "meta": {"key": f"k{i}"}})
    return root


def _audio(root: Path) -> Path:
    from chute.convert import AudioConvertOptions, convert_audio
    from tests._audio import write_recordings

    jsonl = write_recordings(root.parent / "audio-source")
    convert_audio(jsonl, root, AudioConvertOptions(workers=1, progress=False,
                                                   shard_size="40KB"))
    return root


def _videos(root: Path) -> Path:
    import csv

    from chute.convert._convert_video import convert_video_csv
    from tests._video_media import make_video

    source = root.parent / "video-source"
    source.mkdir()
    rows = [["path", "text"]]
    for k, n in enumerate([14, 9, 12, 10]):
        (source / f"v{k}.mp4").write_bytes(make_video(n=n, height=24, width=32, gop=4))
        rows.append([f"v{k}.mp4", f"clip {k}"])
    with open(source / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    convert_video_csv(source / "v.csv", root, progress=False, shard_size="8KB", workers=1)
    return root


# kind -> (builder, Pipeline keyword arguments)
DATASETS = {
    "image": (_images, {"augment": "eval", "fields": {
        "image": ImageOptions(size=16, backend="cpu", dtype="uint8"), "label": None,
        "meta": None}}),
    "ndarray": (_ndarrays, {"augment": "eval", "fields": {
        "latent": None, "rag": None, "label": None, "meta": None, "emb": Lookup("label")}}),
    "audio": (_audio, {"augment": "eval", "fields": {
        "audio": AudioOptions(unit="segment", sample_rate=16000)}}),
    "video": (_videos, {"augment": "eval", "fields": {
        "video": VideoOptions(num_frames=4, frame_interval=2, size=(16, 16)),
        "num_frames": None}}),
}
