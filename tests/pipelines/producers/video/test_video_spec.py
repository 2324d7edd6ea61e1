"""The video producers read the field's VideoOptions itself (issue 39: typed options all the
way down), so its defaults are the only ones; a spec built by hand with a dict of options is
converted once, in the producers' own words."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("av")

from chute.pipelines import Buckets, Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers._contract import ProducerSpec  # noqa: E402
from chute.pipelines.producers._family import FieldContext  # noqa: E402
from chute.pipelines.producers._registry import create_producer  # noqa: E402
from chute.pipelines.producers.video._family import FAMILY  # noqa: E402
from chute.pipelines.producers.video._spec import VideoSpec, video_options  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import convert_videos, make_video  # noqa: E402


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return convert_videos(tmp_path_factory.mktemp("vid"),
                          [(f"v{k}.mp4", make_video(n=12, height=32, width=48, gop=6))
                           for k in range(4)])


def _producer(pipe):
    return next(p for p in pipe._assembly.producers if p.field == "video")


def test_the_family_hands_the_producer_its_video_options_and_the_bucket_table():
    options = VideoOptions(num_frames=3, size=None, crop="random")
    context = FieldContext(None, 4, "cpu", 2, "train", batching={"buckets": "table"})
    spec = FAMILY.build("video", options, context).spec
    assert isinstance(spec, VideoSpec) and spec.name == "video"
    assert spec.options == options and spec.buckets == "table"
    assert video_options(spec) == (options, "table")


def test_a_pipelines_producer_reads_the_fields_options(videos):
    opts = VideoOptions(num_frames=3, frame_interval=2, size=(16, 16), threads=1)
    with Pipeline(videos, 2, augment="eval", device="cpu", fields={"video": opts}) as pipe:
        producer = _producer(pipe)
        assert producer.options == opts and producer.buckets is None
        assert (producer.num_frames, producer.frame_interval, producer.size) == (3, 2, (16, 16))
        assert next(iter(pipe))["video"].shape == (2, 3, 3, 16, 16)
    config = {"32x32": {2: {"1:1": (1.0, 1)}}}
    with Pipeline(videos, None, batching=Buckets(config), fields={"video": opts},
                  device="cpu") as pipe:
        assert _producer(pipe).buckets is pipe.batching.table


def test_a_hand_built_dict_is_converted_once_with_the_dataclass_defaults(videos):
    ds = open_dataset(videos)
    producer = create_producer(ProducerSpec("video", "video", ds, 2, options={"num_frames": 3}))
    try:
        assert producer.options == VideoOptions(num_frames=3)
        assert producer.size == VideoOptions().size and producer.dtype == VideoOptions().dtype
    finally:
        producer.close()


@pytest.mark.parametrize("options, message", [
    ({"num_frames": 0}, "video options need num_frames >= 1 and frame_interval >= 1, got 0, 1"),
    ({"dtype": "float64"}, r"video options: dtype must be one of \('uint8', 'float32', "
                           r"'float16'\) and layout one of \('CTHW', 'TCHW'\), got 'float64', "
                           "'CTHW'"),
    ({"crop": "left"}, r"video option crop must be one of \('center', 'random'\), got 'left'"),
    ({"short": "skip"}, "video options: sampling must be one of"),
    ({"backend": "cpu"}, r"unknown options \['backend'\] for producer 'video'"),
])
def test_a_hand_built_dict_is_refused_in_the_producers_words(options, message):
    spec = ProducerSpec("video", "video", None, 2, options=options)
    with pytest.raises(ValueError, match=message):
        video_options(spec)


def test_a_dict_takes_what_int_takes_and_a_false_threads_is_the_default():
    spec = ProducerSpec("video", "video", None, 2, options={"num_frames": 4.0, "threads": 0})
    options, table = video_options(spec)
    assert options == VideoOptions(num_frames=4) and table is None
    with pytest.raises(TypeError, match="takes VideoOptions or a dict of its options"):
        video_options(dataclasses.replace(spec, options=["num_frames"]))
