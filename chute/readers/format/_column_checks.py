"""Checks at open of the columns whose values other columns or the manifest constrain: a label
indexes `class_names`, an image or video is at least one pixel high and wide, a video's
frame count matches its timestamps, and a recording's channels and rate are plausible. A value
outside is corrupt data, reported when the dataset opens rather than delivered (docs/design.md,
"Shard format"). Each check reads one memory-mapped column once."""

from __future__ import annotations

import numpy as np

from chute.errors import FormatError

__all__ = ["check_columns"]

_PIXEL_MEDIA = ("image", "video")


def _first_wrong(dataset, layout, name: str, wrong: np.ndarray, what: str) -> None:
    if not wrong.any():
        return
    i = int(np.flatnonzero(wrong)[0])
    shard, local = dataset._shard_of(i)
    path = layout.folders[shard] / f"{layout.stems[name]}.npy"
    value = dataset.reader(name).column()[i]
    raise FormatError(f"{path}: sample {i} (row {local}) has {name} {value}, {what}; the column "
                      "is corrupt: restore the file (`chute verify` names it) or re-convert")


def _integer_column(dataset, name: str) -> np.ndarray | None:
    reader = dataset._readers.get(name)
    if not hasattr(reader, "column") or reader.dtype.kind not in "iu":
        return None
    return reader.column()


def _check_video(dataset, layout) -> None:
    """`chute convert video` stores one timestamp per frame (`pts`, ragged) and a rotation in
    degrees [0, 360): a frame count that disagrees would index past the timestamps."""
    frames = _integer_column(dataset, "num_frames")
    pts = getattr(dataset._readers.get("pts"), "rows", None)
    if frames is not None and pts is not None:
        _first_wrong(dataset, layout, "num_frames", frames != pts,
                     "but its pts record holds a different number of timestamps")
    rotation = _integer_column(dataset, "rotation")
    if rotation is not None:
        _first_wrong(dataset, layout, "rotation", (rotation < 0) | (rotation >= 360),
                     "outside [0, 360) degrees")


# libsndfile's own limit on channels; rates beyond any audio format's
_AUDIO_RANGES = {"channels": (1, 1024), "sample_rate": (1, 1 << 24)}


def _check_audio(dataset, layout) -> None:
    """A recording's channel count and rate size the decode buffers: outside what any audio
    file holds, they are corrupt (a value inside but wrong fails that sample when it decodes)."""
    for name, (low, high) in _AUDIO_RANGES.items():
        values = _integer_column(dataset, name)
        if values is not None:
            _first_wrong(dataset, layout, name, (values < low) | (values > high),
                         f"outside [{low}, {high}]")


def check_columns(dataset, layout) -> None:
    """FormatError naming the file and sample of the first value out of its range."""
    labels = _integer_column(dataset, "label")
    names = dataset.class_names
    if labels is not None and names is not None:
        _first_wrong(dataset, layout, "label", (labels < 0) | (labels >= len(names)),
                     f"outside the {len(names)} class names of {layout.root}/chute.json")
    # bytes without a media name are images to the Pipeline when height/width exist
    if any(spec["kind"] == "bytes" and spec.get("media", "image") in _PIXEL_MEDIA
           for spec in dataset.specs.values()):
        for name in ("height", "width"):
            sizes = _integer_column(dataset, name)
            if sizes is not None:
                _first_wrong(dataset, layout, name, sizes < 1, "but sizes are at least 1 pixel")
    if any(spec["kind"] == "bytes" and spec.get("media") == "video"
           for spec in dataset.specs.values()):
        _check_video(dataset, layout)
    if any(spec["kind"] == "bytes" and spec.get("media") == "audio"
           for spec in dataset.specs.values()):
        _check_audio(dataset, layout)
