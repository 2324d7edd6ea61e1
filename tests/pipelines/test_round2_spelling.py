"""The round-2 keyword arguments (chute/pipelines/_compat.py) keep working for one release: each
acceptance scenario of round 2 -- images, latents, audio segments by duration, merged segments,
bucketed video, table lookups -- gives the same batches and the same resume state in the old
spelling (with a DeprecationWarning that shows the new one) as in the new spelling. So does
round 3's `shuffle=` (True, False, ShardWindows), now `order=`, on one dataset and on a mix."""

from __future__ import annotations

import re

import pytest
import torch

from chute import (
    ArrayOptions,
    AudioOptions,
    Buckets,
    CropConfig,
    ImageOptions,
    Lookup,
    MaxDuration,
    Pipeline,
    ShardWindows,
    VideoOptions,
)
from tests.pipelines._pipeline_data import write_dataset


def _same(old_args: dict, new_args: dict, path, batch_size, steps: int = 3,
          spelling: str = "round-2") -> None:
    with pytest.warns(DeprecationWarning, match=f"{spelling} spelling") as caught:
        old = Pipeline(path, batch_size, device="cpu", seed=3, **old_args)
    message = str(caught[0].message)
    fields = new_args.get("fields") if spelling == "round-2" else None  # round 3: order=
    for cls in {type(o).__name__ for o in (fields or {}).values() if o}:
        assert f"{cls}(" in message, message  # the warning shows the new spelling
    batching = new_args.get("batching")  # a cap of its own: batch_size None
    new = Pipeline(path, None if getattr(batching, "max_samples", None) else batch_size,
                   device="cpu", seed=3, **new_args)
    with old, new:
        assert len(old) == len(new) > 0
        for k, (a, b) in enumerate(zip(old, new, strict=True)):
            assert a.keys() == b.keys()
            for key in a:
                if isinstance(a[key], torch.Tensor):
                    assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
                else:
                    assert a[key] == b[key], key
            if k + 1 == steps:
                assert old.state_dict() == new.state_dict()
                break


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("img") / "ds", n=24, latent_shape=(2, 3))


def test_images(images):
    crop = CropConfig(scale=(0.35, 1), flip_p=0.5)
    _same(dict(image_size=(12, 16), backend="cpu", dtype="float32", layout="NHWC",
               mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), crop=crop),
          dict(fields={"image": ImageOptions(size=(12, 16), backend="cpu", dtype="float32",
                                             layout="NHWC", mean=(123.675, 116.28, 103.53),
                                             std=(58.395, 57.12, 57.375), crop=crop),
                       "label": None}), images, 4)
    _same(dict(image_size=16, backend="cpu", eval_crop="crop-resize", augment="eval",
               memory_format=torch.channels_last, backend_options={"threads": 1}),
          dict(fields={"image": ImageOptions(size=16, backend="cpu", eval_crop="crop-resize",
                                             memory_format=torch.channels_last,
                                             backend_options={"threads": 1}),
                       "label": None}, augment="eval"), images, 4)


def test_latents(images):
    _same(dict(fields=("latent", "label"), field_options={"latent": {"dtype": "bfloat16"}}),
          dict(fields={"latent": ArrayOptions(dtype="bfloat16"), "label": None}), images, 5)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from tests._audio import convert_recordings

    return convert_recordings(tmp_path_factory.mktemp("rec"))


def test_audio_segments_by_duration(recordings):
    _same(dict(fields=("audio",), unit="segment", max_duration=2.5,
               field_options={"audio": {"sample_rate": 8000, "speeds": (0.9, 1.1)}}),
          dict(fields={"audio": AudioOptions(unit="segment", sample_rate=8000,
                                             speeds=(0.9, 1.1))},
               batching=MaxDuration(2.5, max_samples=3)), recordings, 3)


def test_merged_segments(recordings):
    _same(dict(fields=("audio",), unit="segment", merge=(0.3, 0.9),
               field_options={"audio": {"sample_rate": 8000}}),
          dict(fields={"audio": AudioOptions(unit="segment", merge=(0.3, 0.9),
                                             sample_rate=8000)}), recordings, 2)


def test_bucketed_video(tmp_path):
    pytest.importorskip("av")
    from tests._video_media import convert_videos, make_video

    sizes = [(32, 48), (32, 48), (32, 32), (32, 48), (32, 32), (32, 48)]
    path = convert_videos(tmp_path, [(f"v{k}.mp4", make_video(n=10, height=h, width=w, gop=4))
                                     for k, (h, w) in enumerate(sizes)])
    config = {"32x48": {2: (1.0, 2)}, "32x32": {2: (1.0, 1)}}
    _same(dict(fields=("video",), buckets=config, field_options={"video": {
        "frame_interval": 2, "dtype": "float32"}}),
          dict(fields={"video": VideoOptions(frame_interval=2, dtype="float32")},
               batching=Buckets(config)), path, None)


def test_table_lookups(tmp_path):
    pytest.importorskip("zarr")
    from tests.readers._zarr_stores import latents_values, open_latents, write_store

    store = open_latents(write_store(tmp_path / "x.zarr", latents_values(40, 6, seed=3)))
    _same(dict(fields=("base_frames", "clip_emb"), lookups={"clip_emb": "segment_to_video"},
               field_options={"clip_emb": {"dtype": "float32"}}),
          dict(fields={"base_frames": None,
                       "clip_emb": Lookup("segment_to_video", dtype="float32")}), store, 8)


def test_the_old_spelling_cannot_be_mixed_with_options(images):
    with pytest.raises(ValueError, match="cannot be mixed with fields=\\{name: options\\}"):
        Pipeline(images, 4, fields={"image": ImageOptions()}, image_size=32)
    with pytest.raises(ValueError, match="either max_duration= or batching="):
        Pipeline(images, 4, fields=("label",), max_duration=2.0,
                 batching=MaxDuration(2.0))


def test_field_options_of_an_image_field_merge_with_the_image_keywords(images):
    crop = CropConfig(scale=(0.5, 1), flip_p=0.0)
    _same(dict(image_size=16, crop=crop, field_options={"image": {"backend": "cpu"}}),
          dict(fields={"image": ImageOptions(size=16, crop=crop, backend="cpu"),
                       "label": None}), images, 4)


@pytest.mark.parametrize(("shuffle", "order"), [(True, "shuffle"), (False, "sequential"),
                                                (ShardWindows(2), ShardWindows(2))])
@pytest.mark.parametrize("augment", ["train", "eval"])
def test_round3_shuffle_is_order(images, shuffle, order, augment):
    with pytest.warns(DeprecationWarning, match=re.escape(f"write order={order!r}")):
        Pipeline(images, 4, device="cpu", shuffle=shuffle).close()
    fields = {"image": ImageOptions(size=8, backend="cpu"), "label": None}
    _same(dict(fields=fields, shuffle=shuffle, augment=augment),
          dict(fields=fields, order=order, augment=augment), images, 4, spelling="round-3")


@pytest.mark.parametrize(("shuffle", "order"), [(True, "shuffle"), (False, "sequential")])
def test_round3_shuffle_of_a_mix(images, tmp_path, shuffle, order):
    import chute

    other = write_dataset(tmp_path / "other", n=10, latent_shape=(2, 3))
    mixed = chute.mix({"a": images, "b": other}, weights={"a": 0.5, "b": 0.5})
    _same(dict(fields=("label",), shuffle=shuffle), dict(fields=("label",), order=order),
          mixed, 4, spelling="round-3")


def test_round3_shuffle_and_order_cannot_both_be_given(images):
    for order in ("sequential", "shuffle"):  # also the default, when given
        with pytest.raises(ValueError, match="either shuffle= or order="):
            Pipeline(images, 4, device="cpu", shuffle=False, order=order)


def test_round3_batch_size_under_max_duration_is_max_samples(recordings):
    audio = {"audio": AudioOptions(unit="segment", sample_rate=8000, speeds=(0.9, 1.1))}
    _same(dict(fields=audio, batching=MaxDuration(2.5)),
          dict(fields=audio, batching=MaxDuration(2.5, max_samples=3)), recordings, 3,
          spelling="round-3")
    with pytest.raises(ValueError, match="both cap a batch; pass batch_size=None"):
        Pipeline(recordings, 3, fields=audio, batching=MaxDuration(2.5, max_samples=3))
    with pytest.raises(ValueError, match=r"write batching=MaxDuration\(2.5, max_samples=N\)"):
        Pipeline(recordings, fields=audio, batching=MaxDuration(2.5))


def test_round3_warnings_point_at_the_callers_line(images, recordings):
    """Python shows a DeprecationWarning only where it is attributed to the caller's code."""
    with pytest.warns(DeprecationWarning, match="round-3 spelling") as caught:
        Pipeline(images, 4, device="cpu", shuffle=False).close()
    assert caught[0].filename == __file__
    audio = {"audio": AudioOptions(unit="segment", sample_rate=8000)}
    with pytest.warns(DeprecationWarning, match="round-3 spelling") as caught:
        Pipeline(recordings, 3, device="cpu", fields=audio, batching=MaxDuration(2.5)).close()
    assert caught[0].filename == __file__


def test_round3_positional_window_of_max_duration_is_still_the_window():
    assert MaxDuration(60, 512).window == 512 and MaxDuration(60, 512).max_samples is None


def test_the_round2_max_duration_warning_spells_what_works(recordings):
    with pytest.warns(DeprecationWarning, match="round-2 spelling") as caught:
        Pipeline(recordings, 3, device="cpu", fields=("audio",), unit="segment",
                 max_duration=2.5).close()
    message = str(caught[0].message)
    assert "batch_size=None" in message and "max_samples=3" in message, message
