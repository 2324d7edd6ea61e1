"""End to end on the CPU: real DALI tensors from a CPU-mode ROI decode (the `dali` graph with
device="cpu"), their own array interface presented as a CUDA array interface (DALI reports uint8
as typestr "=B"), through source_views / pack_args into the kernel's host shim, compared with the
NumPy reference of the resize definition over the full-frame decode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("nvidia.dali")

from chute.kernels import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from chute.pipelines.producers._dali._graph import DaliGraphConfig, build_dali_pipeline  # noqa: E402
from chute.pipelines.producers.image._dali_source import DaliBatchSource  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._reference_resize import reference_batch  # noqa: E402
from tests.kernels.compare import CpuAsCuda, assert_matches_reference, run_shim  # noqa: E402
from tests.pipelines._dali_data import write_jpeg_dataset  # noqa: E402
from tests.pipelines._plans import image_batch, image_plan  # noqa: E402


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(write_jpeg_dataset(tmp_path_factory.mktemp("e2e") / "ds.chute", n=12))


def full_frames(dataset, ids) -> list[np.ndarray]:
    return [np.asarray(Image.open(io.BytesIO(dataset[int(i)]["image"].tobytes())).convert("RGB"))
            for i in ids]


def run_batches(dataset, kernel_shim, size, margin_for, mode="train"):
    """Yields (kernel output, reference) float32 NHWC per batch of an epoch."""
    plan = image_plan(dataset, size, seed=5, batch_size=6, mode=mode)
    source = DaliBatchSource(plan, margin_for=margin_for)
    pipe = build_dali_pipeline(source, DaliGraphConfig("kernel", 6, size, dtype="float32",
                                                       layout="NHWC"))
    for it in range(len(plan)):
        ids, boxes, flips = image_batch(plan, it)
        crops, _, _ = pipe.run()
        sources = [CpuAsCuda(crops[k]) for k in range(len(crops))]
        assert sources[0].__cuda_array_interface__["typestr"] == "=B"  # what DALI reports
        _, inner = source.windows(ids, boxes)
        out = np.full((len(ids), *size, 3), 77, dtype=np.float32)
        run_shim(kernel_shim, sources, inner, flips, out, "NHWC")
        want = reference_batch(full_frames(dataset, ids), np.asarray(boxes, np.float64), flips,
                               *size, np.float32, "NHWC", IMAGENET_MEAN, IMAGENET_STD)
        yield out, want


def edge_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference on the border rows and columns, in 0..255 units."""
    diff = np.abs(got - want) * (255.0 * np.asarray(IMAGENET_STD))
    return float(max(diff[:, [0, -1]].max(), diff[:, :, [0, -1]].max()))


@pytest.mark.parametrize("size, mode", [((32, 32), "train"), ((20, 28), "train"),
                                        ((32, 32), "eval"), ((20, 28), "eval")])
def test_dali_cpu_tensors_through_the_shim_match_the_reference(dataset, kernel_shim, size,
                                                               mode):
    """eval: torchvision's fractional boxes, their windows and margins from the shared rule."""
    batches = 0
    for got, want in run_batches(dataset, kernel_shim, size, margin_for=size, mode=mode):
        assert_matches_reference(got, want)  # border pixels included: the ROI has the margin
        batches += 1
    assert batches > 0


def test_without_the_margin_the_border_pixels_differ(dataset, kernel_shim):
    """Negative control: decoding exactly the crop box (no resample margin) clips the border
    taps, which the comparison above must be able to see."""
    worst = max(edge_error(got, want)
                for got, want in run_batches(dataset, kernel_shim, (20, 28), margin_for=None))
    assert worst > 1.0
