"""Per-field typed options (chute/pipelines/_fields.py and each family's options): the core
takes at most 16 named parameters, every option class applies to its own kind of field only,
and a misplaced option is an error naming the field, its kind and the class to use."""

from __future__ import annotations

import inspect

import pytest
import torch

import chute
from chute import (
    ArrayOptions,
    AudioOptions,
    ImageOptions,
    Lookup,
    MaxDuration,
    Pipeline,
    VideoOptions,
)
from tests._media import jpeg
from tests.pipelines._pipeline_data import write_dataset


def test_the_core_has_at_most_16_named_parameters():
    named = [p for p in inspect.signature(chute.Pipeline).parameters.values()
             if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert len(named) <= 16
    assert chute.Pipeline is chute.pipelines.Pipeline


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("img") / "ds", n=12, latent_shape=(2, 3))


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    pytest.importorskip("av")
    from tests._video_media import convert_videos, make_video

    return convert_videos(tmp_path_factory.mktemp("vid"),
                          [(f"v{k}.mp4", make_video(n=8, height=32, width=48)) for k in range(3)])


@pytest.mark.parametrize("field, options, right", [
    ("image", VideoOptions(), "ImageOptions"),
    ("image", ArrayOptions(), "ImageOptions"),
    ("latent", ImageOptions(), "ArrayOptions"),
    ("latent", Lookup("label"), "ArrayOptions"),
])
def test_options_of_another_kind_are_refused(images, field, options, right):
    kind = "an image" if field == "image" else "an ndarray"
    with pytest.raises(ValueError, match=rf"field '{field}' of .* is {kind} field: "
                                         rf"{type(options).__name__} does not apply to it; "
                                         rf"give {right}\(\.\.\.\) or None"):
        Pipeline(images, 4, fields={field: options}, device="cpu")


def test_a_video_field_with_image_options_is_refused(videos):
    with pytest.raises(ValueError, match=r"field 'video' .* is a video field: ImageOptions "
                                         r"does not apply to it; give VideoOptions"):
        Pipeline(videos, 2, fields={"video": ImageOptions(dtype="float32")}, device="cpu")
    # the round-2 spelling of the same mistake (a top-level image option) is refused too
    with pytest.raises(ValueError, match=r"\['dtype'\] apply to image fields and none of "
                                         r"fields=\['video'\] holds images"):
        Pipeline(videos, None, fields=("video",), buckets={"32x48": {2: (1.0, 1)}},
                 dtype="float32", device="cpu")


def test_fields_without_options_refuse_them_and_tables_need_a_lookup(images):
    with pytest.raises(ValueError, match=r"'label' .* is a scalar field, which takes no "
                                         r"options; give None \(got ArrayOptions\)"):
        Pipeline(images, 4, fields={"label": ArrayOptions()}, device="cpu")
    with pytest.raises(TypeError, match=r"got the string 'image'; write fields=\('image',\)"):
        Pipeline(images, 4, fields="image", device="cpu")
    with pytest.raises(TypeError, match=r"batching must be chute.MaxDuration"):
        Pipeline(images, 4, fields=("label",), batching=3, device="cpu")
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        Pipeline(images, 4, fields=("label",), image_sise=32, device="cpu")


def test_new_spelling_delivers_what_the_options_say(images):
    image = ImageOptions(size=(8, 12), backend="cpu", dtype="bfloat16",
                         memory_format=torch.channels_last)
    fields = {"image": image, "latent": ArrayOptions(dtype="float32"), "label": None}
    with Pipeline(images, 4, fields=fields, device="cpu", augment="eval") as pipe:
        batch = next(iter(pipe))
        assert pipe.stats.backend == "cpu" and pipe.stats.field_backends["image"]["backend"] \
            == "cpu"
    assert batch["image"].shape == (4, 3, 8, 12) and batch["image"].dtype == torch.bfloat16
    assert batch["image"].is_contiguous(memory_format=torch.channels_last)
    assert batch["latent"].dtype == torch.float32 and batch["label"].shape == (4,)


def test_one_sample_unit_per_pipeline(tmp_path):
    pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from tests._audio import convert_recordings

    folder = convert_recordings(tmp_path)
    with Pipeline(folder, fields={"audio": AudioOptions(unit="segment")},
                  batching=MaxDuration(2.5, max_samples=2), device="cpu") as pipe:
        assert pipe._unit is not None and pipe._unit.name == "segment"
    with pytest.raises(ValueError, match="needs unit='segment'"):
        Pipeline(folder, 2, fields={"audio": AudioOptions(merge=(0.5, 1.0))}, device="cpu")


def test_an_image_field_written_without_its_size_columns_says_how_to_add_them(tmp_path):
    # docs/format.md's ShardWriter example wrote no height/width, and the error only said
    # `chute convert`, which a dataset written from Python does not go through
    from chute.convert import ShardWriter
    from chute.errors import FormatError

    payload = jpeg(12, 16)
    with ShardWriter(tmp_path / "bare.chute", {"image": {"kind": "bytes", "media": "image"}}) as w:
        w.write({"image": payload})
    with pytest.raises(FormatError, match=r"ShardWriter int32 'height' and 'width' fields"):
        chute.Pipeline(tmp_path / "bare.chute", 1, device="cpu")
    with ShardWriter(tmp_path / "sized.chute", {"image": {"kind": "bytes", "media": "image"},
                                                "height": "int32", "width": "int32"}) as w:
        w.write({"image": payload, "height": 12, "width": 16})
    with chute.Pipeline(tmp_path / "sized.chute", 1, device="cpu", fields={
            "image": chute.ImageOptions(size=8, backend="cpu")}) as pipe:
        assert next(iter(pipe))["image"].shape == (1, 3, 8, 8)
