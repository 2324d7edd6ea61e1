"""The DALI backends through chute.Pipeline on a machine without a GPU.

Must show: `Pipeline(..., fields={"image": ImageOptions(backend="dali-native")}, device="cpu")` and
`Pipeline(..., fields={"image": ImageOptions(backend="cpu")})`
with the same seed deliver the same sample ids in the same order and images within the resize
tolerance: mean |difference| <= 1.0 per batch in 0..255 units (float outputs de-normalised; DALI's
resize and ROI decode are not bit-identical to the PIL definition the CPU backend follows).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from chute.readers import open_dataset
from tests.pipelines._dali_data import to_255_nhwc, write_jpeg_dataset

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TOLERANCE = 1.0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("dali") / "ds.chute", n=26))


def collect(dataset, backend, augment="train", **image):
    from chute import ImageOptions, Pipeline

    fields = {"image": ImageOptions(backend=backend, **image), "label": None}
    with Pipeline(dataset, 6, fields=fields, augment=augment, device="cpu", seed=11) as pipe:
        return [{k: (v.numpy().copy() if hasattr(v, "numpy") else v) for k, v in b.items()}
                for b in pipe]


@pytest.mark.parametrize(
    "kwargs",
    [dict(size=32, dtype="float16", layout="NCHW"),
     dict(size=(40, 24), dtype="uint8", layout="NHWC"),
     dict(size=48, dtype="float32", layout="NCHW", augment="eval")],
)
def test_dali_native_cpu_mode_matches_the_cpu_backend(dataset, kwargs):
    pytest.importorskip("nvidia.dali")
    cpu = collect(dataset, "cpu", **kwargs)
    dali = collect(dataset, "dali-native", **kwargs)
    assert len(cpu) == len(dali) > 0
    dtype, layout = kwargs["dtype"], kwargs["layout"]
    for a, b in zip(cpu, dali, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        np.testing.assert_array_equal(a["label"], b["label"])
        assert a["image"].shape == b["image"].shape and a["image"].dtype == b["image"].dtype
        diff = np.abs(to_255_nhwc(a["image"], dtype, layout, MEAN, STD)
                      - to_255_nhwc(b["image"], dtype, layout, MEAN, STD))
        assert diff.mean() <= TOLERANCE
    if kwargs.get("augment") == "eval":  # every sample once, last batch short
        ids = np.concatenate([b["index"] for b in dali])
        assert sorted(ids.tolist()) == list(range(len(dataset)))


@pytest.mark.slow
def test_without_dali_import_works_and_the_error_names_the_extra(dataset):
    script = textwrap.dedent(f"""
        import sys
        sys.modules["nvidia.dali"] = None  # makes `import nvidia.dali` raise ImportError
        import chute
        from chute.errors import BackendUnavailableError
        # importable without DALI: DALI is imported lazily
        import chute.pipelines.producers.image._dali
        try:
            chute.Pipeline({str(dataset.path)!r}, 4, device="cpu", fields={{
                "image": chute.ImageOptions(backend="dali-native"), "label": None}})
        except BackendUnavailableError as err:
            print(err)
        else:
            print("NO ERROR")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "nvidia-dali-cuda120" in result.stdout
    assert "pip install chute[dali]" in result.stdout


def test_pipeline_dali_on_cuda_fails_fast_without_a_device(dataset):
    from chute import BackendUnavailableError, ImageOptions, Pipeline
    from chute._device import cuda_device_count

    if cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(BackendUnavailableError, match="no CUDA device is available"):
        Pipeline(dataset, 4, fields={"image": ImageOptions(backend="dali"), "label": None},
                 device="cuda")
