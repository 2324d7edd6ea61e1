import pytest

from tests.kernels.shim_build import build_shim


@pytest.fixture(scope="session")
def kernel_shim(tmp_path_factory):
    """The kernel source compiled for the CPU through the host shim (skips without g++)."""
    try:
        return build_shim(tmp_path_factory.mktemp("kernel_shim"))
    except FileNotFoundError as exc:
        pytest.skip(f"cannot build the host shim: {exc}")
