"""What the video producers are built from: the field's `VideoOptions`, whose defaults are the
only ones, and the bucket table of a `Buckets` batching (docs/video.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chute.pipelines.producers._contract import ProducerSpec, check_options
from chute.pipelines.producers.video._crop import CROPS
from chute.pipelines.producers.video._options import VideoOptions, clip_size

__all__ = ["VideoSpec", "video_options"]

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(VideoOptions)}
# what a hand-built dict may hold: VideoOptions' fields but the backend (the producer's name
# says it), and the bucket table
_DICT_KEYS = frozenset(set(_DEFAULTS) - {"backend"} | {"buckets"})
_SAMPLINGS = ("window", "uniform")
_SHORT = ("repeat", "error")
_DTYPES = ("uint8", "float32", "float16")
_LAYOUTS = ("CTHW", "TCHW")


@dataclass(frozen=True)
class VideoSpec(ProducerSpec):
    """A ProducerSpec for the video producers, whose `options` is the field's `VideoOptions`.

    Attributes:
        buckets: the `Buckets` batching's table (the plan gives each batch its frame count
            and size), or None.
    """

    buckets: Any = None


def video_options(spec: ProducerSpec) -> tuple[VideoOptions, Any]:
    """(VideoOptions, bucket table or None) of a video producer's spec: a `VideoSpec` as the
    video family builds it, or a ProducerSpec whose options are a dict of VideoOptions' fields
    (without `backend`; the table under "buckets"), converted once; unknown keys raise.

    Args:
        spec: the producer's spec.
    """
    table = getattr(spec, "buckets", None)
    if isinstance(spec.options, VideoOptions):
        return spec.options, table
    if not isinstance(spec.options, Mapping):
        raise TypeError(f"producer {spec.name!r} of field {spec.field!r} takes VideoOptions "
                        f"or a dict of its options, got {type(spec.options).__name__}")
    given = dict(spec.options)
    check_options(spec.name, given, _DICT_KEYS)
    if "buckets" in given:
        table = given.pop("buckets")
    values = {**_DEFAULTS, **given}
    _check_values(values)
    # a dict (the inference loader's) takes what int() takes, and a false `threads` for the
    # default, as the producers always did
    values.update(num_frames=int(values["num_frames"]),
                  frame_interval=int(values["frame_interval"]),
                  threads=int(values["threads"]) if values["threads"] else None)
    return VideoOptions(**values), table


def _check_values(values: dict) -> None:
    """Refuse a hand-built dict's values in the words and order the producers always did
    (VideoOptions says it its own way for the values it is given)."""
    num_frames, interval = int(values["num_frames"]), int(values["frame_interval"])
    if num_frames < 1 or interval < 1:
        raise ValueError(f"video options need num_frames >= 1 and frame_interval >= 1, got "
                         f"{num_frames}, {interval}")
    clip_size(values["size"])
    if values["dtype"] not in _DTYPES or values["layout"] not in _LAYOUTS:
        raise ValueError(f"video options: dtype must be one of {_DTYPES} and layout one of "
                         f"{_LAYOUTS}, got {values['dtype']!r}, {values['layout']!r}")
    if values["crop"] not in CROPS:
        raise ValueError(f"video option crop must be one of {CROPS}, got {values['crop']!r}")
    if values["sampling"] not in _SAMPLINGS or values["short"] not in _SHORT:
        raise ValueError(f"video options: sampling must be one of {_SAMPLINGS} and short "
                         f"one of {_SHORT}, got {values['sampling']!r}, {values['short']!r}")
