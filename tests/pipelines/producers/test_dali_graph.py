"""The DALI graph's decode rule: EXIF orientation ignored (as the CPU decoder does), fancy chroma
upsampling on the GPU decoder (as libjpeg-turbo), declared external_source types, shared
dtype/layout checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("nvidia.dali")

from chute.pipelines.producers._dali._graph import DaliGraphConfig, decode_arguments  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._datasets import write_samples  # noqa: E402
from tests._media import smooth_image  # noqa: E402
from tests.pipelines._dali_data import to_255_nhwc  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ORIENTATION = 0x0112  # the EXIF tag


def rotated_jpeg(height: int, width: int, seed: int) -> bytes:
    """A non-square JPEG whose EXIF says "rotate 90 degrees clockwise to display" (6)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    buffer = io.BytesIO()
    Image.fromarray(smooth_image(height, width, seed)).save(buffer, "JPEG", quality=92,
                                                             exif=exif.tobytes())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def rotated_dataset(tmp_path_factory):
    sizes = [(40, 90), (96, 50), (36, 70), (80, 44), (48, 100), (60, 32)] * 2
    samples = ({"image": rotated_jpeg(h, w, i), "label": i, "height": h, "width": w}
               for i, (h, w) in enumerate(sizes))
    path = tmp_path_factory.mktemp("exif") / "ds.chute"
    fields = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32"}
    return open_dataset(write_samples(path, fields, samples))


def collect(dataset, backend, augment, **image):
    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(backend=backend, **image), "label": None}
    with Pipeline(dataset, 6, fields=fields, augment=augment, device="cpu", seed=4) as pipe:
        return [{k: v.numpy().copy() for k, v in b.items()} for b in pipe]


@pytest.mark.parametrize("augment", ["train", "eval"])
def test_exif_orientation_is_ignored_like_the_cpu_backend(rotated_dataset, augment):
    """Crop windows come from the stored size: a decoder applying EXIF would see a transposed
    image (invalid windows, or crops of the rotated picture)."""
    assert Image.open(io.BytesIO(rotated_dataset[0]["image"].tobytes())).getexif()[ORIENTATION] \
        == 6
    kwargs = dict(size=(24, 32), dtype="float32", layout="NHWC", augment=augment)
    cpu = collect(rotated_dataset, "cpu", **kwargs)
    dali = collect(rotated_dataset, "dali-native", **kwargs)
    assert len(cpu) == len(dali) > 0
    for a, b in zip(cpu, dali, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        diff = np.abs(to_255_nhwc(a["image"], "float32", "NHWC", MEAN, STD)
                      - to_255_nhwc(b["image"], "float32", "NHWC", MEAN, STD))
        assert diff.mean() <= 1.0


def test_decode_arguments_follow_the_cpu_decoder():
    from nvidia.dali import types

    cpu = decode_arguments(DaliGraphConfig("kernel", 4, (8, 8)), types)
    gpu = decode_arguments(DaliGraphConfig("kernel", 4, (8, 8), device_id=0), types)
    assert cpu["device"] == "cpu" and gpu["device"] == "mixed"
    assert cpu["adjust_orientation"] is False and gpu["adjust_orientation"] is False
    assert gpu["jpeg_fancy_upsampling"] is True  # libjpeg-turbo's default; DALI's is False


def test_config_uses_the_shared_dtype_and_layout_checks():
    import torch

    assert DaliGraphConfig("native", 4, (8, 8), dtype=torch.float16).dtype == "float16"
    with pytest.raises(ValueError, match="NCWH"):
        DaliGraphConfig("native", 4, (8, 8), layout="NCWH")
    with pytest.raises(ValueError):
        DaliGraphConfig("native", 4, (8, 8), dtype="int16")


@pytest.mark.parametrize("with_roi", [False, True])
def test_external_source_declares_what_the_source_returns(rotated_dataset, with_roi):
    """dtype/ndim are declared per output and match the arrays DaliBatchSource hands DALI."""
    from nvidia.dali import types

    from chute.pipelines.producers._dali._graph import _source_types
    from chute.pipelines.producers.image._dali_source import (
        ROI_SOURCE_OUTPUTS,
        SOURCE_OUTPUTS,
        DaliBatchSource,
    )
    from tests.pipelines._plans import image_plan

    names = ROI_SOURCE_OUTPUTS if with_roi else SOURCE_OUTPUTS
    declared = _source_types(types, names)
    numpy_of = {types.UINT8: np.uint8, types.FLOAT: np.float32, types.INT32: np.int32,
                types.INT64: np.int64}
    plan = image_plan(rotated_dataset, (16, 16), batch_size=4)
    source = DaliBatchSource(plan, with_roi=with_roi)
    assert source.outputs == names
    batch = source(type("BatchInfo", (), {"iteration": 0, "epoch_idx": 0})())
    assert len(batch) == len(names) == len(declared["dtype"]) == len(declared["ndim"])
    for name, output, dtype, ndim in zip(names, batch, declared["dtype"],
                                         declared["ndim"], strict=True):
        samples = list(output)  # a list of samples or a [B, ...] array
        assert all(np.asarray(s).dtype == numpy_of[dtype] for s in samples), name
        assert all(np.asarray(s).ndim == ndim for s in samples), name
