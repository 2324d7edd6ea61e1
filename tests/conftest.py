import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests cleanly where no CUDA device exists."""
    from chute._device import cuda_device_count

    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_images():
    """The real ImageNet sample of ../shared/data, or a skip where it is absent."""
    path = SHARED_DATA / "imagenet-sample" / "images"
    if not path.is_dir() or os.environ.get("CHUTE_NO_SHARED"):
        pytest.skip("../shared/data/imagenet-sample is not present")
    return path
