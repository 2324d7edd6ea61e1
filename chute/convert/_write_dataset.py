"""`write_dataset(samples, path)`: a chute dataset from any Python iterable of dicts (a list,
a generator over your own files, a Hugging Face `datasets.Dataset`, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from chute.convert._hf import hf_class_names, hf_rows, is_hf_dataset, undecoded_images
from chute.convert._transcode import TRANSCODE_QUALITY
from chute.convert._writer import ShardWriter
from chute.errors import FormatError
from chute.readers import Dataset, open_dataset
from chute.readers.kinds import infer_declaration

__all__ = ["write_dataset", "with_jpeg", "image_declarations"]


def write_dataset(samples: Iterable[dict], path: str | Path, *, image_field: str = "image",
                  fields: dict | None = None, shard_size: str | int = "1GiB",
                  class_names: list[str] | None = None, overwrite: bool = False,
                  quality: int = TRANSCODE_QUALITY) -> Dataset:
    """Write `samples` as a chute dataset and open it.

    Each sample is a dict of field -> value (bytes, str, numbers, NumPy arrays, JSON-able
    objects; kinds are inferred from the first sample unless `fields` declares them). The
    `image_field` value may be encoded image bytes of any format Pillow reads, or a
    `PIL.Image.Image`: it is stored as JPEG (JPEG bytes unchanged) with the "height" and
    "width" columns the Pipeline computes crops from. A Hugging Face `datasets.Dataset` is
    read as `chute convert hf` reads it: its `Image` column undecoded (JPEG files stored as
    they are, not re-encoded) and the names of a `ClassLabel` column "label" as `class_names`.

    Args:
        samples: the samples, in order; sample i becomes global index i.
        path: the new dataset folder.
        image_field: the field holding images (absent from the samples: no image handling).
        fields: field -> kind declarations (default: inferred from the first sample).
        shard_size: payload bytes per shard, e.g. "1GiB" or "256MiB".
        class_names: label names stored in the manifest (`label` values index them; default
            for a `datasets.Dataset`: its ClassLabel names).
        overwrite: replace a dataset already at `path`.
        quality: JPEG quality for images that are not JPEG already (stored without
            chroma subsampling).

    Raises:
        FormatError: an image that cannot be read (naming the sample) or no samples at all.
    """
    if is_hf_dataset(samples):
        # as `chute convert hf` reads it: the Image column's files as they are (JPEGs are not
        # decoded and re-encoded), the ClassLabel names of `label` as class names
        if class_names is None:
            class_names = hf_class_names(samples, "label")
        table, encoded = undecoded_images(samples, image_field)
        samples = hf_rows(table, image_field, encoded, f"write_dataset({path})")
    iterator = iter(samples)
    first = next(iterator, None)
    if first is None:
        raise FormatError(f"write_dataset({path}): the iterable gave no samples")
    if image_field in first:
        first = with_jpeg(first, image_field, 0, quality)
    if fields is None:
        fields = {name: infer_declaration(value) for name, value in first.items()}
    if image_field in first:
        fields = image_declarations(fields, image_field)
    with ShardWriter(path, fields, shard_size=shard_size, class_names=class_names,
                     overwrite=overwrite) as writer:
        writer.write(first)
        for i, sample in enumerate(iterator, start=1):
            if image_field in sample:
                sample = with_jpeg(sample, image_field, i, quality)
            writer.write(sample)
    dataset = open_dataset(path)
    assert isinstance(dataset, Dataset)  # a chute folder, just written
    return dataset


def image_declarations(fields: dict, image_field: str) -> dict:
    """`fields` (declarations) with `image_field` declared as image bytes and the "height" and
    "width" columns the Pipeline computes crops from, as `with_jpeg` fills them."""
    return {**fields, image_field: {"kind": "bytes", "media": "image"},
            "height": "int32", "width": "int32"}


def with_jpeg(sample: dict, image_field: str, i: int, quality: int) -> dict:
    """`sample` with `image_field` stored as JPEG (JPEG bytes as they are) and its height and
    width; FormatError naming sample `i` when it is not a readable image."""
    from PIL import Image

    from chute.convert._images import UnreadableImage, encode_jpeg, prepare_image

    value = sample[image_field]
    if isinstance(value, Image.Image):

        value = encode_jpeg(value, quality)
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise FormatError(f"sample {i}: {image_field!r} must be encoded image bytes or a "
                          f"PIL.Image, got {type(value).__name__}")
    try:
        image = prepare_image(bytes(value), quality=quality)
    except UnreadableImage as exc:
        raise FormatError(f"sample {i}: {image_field!r} is not a readable image ({exc})") from None
    return {**sample, image_field: image.data, "height": image.height, "width": image.width}
