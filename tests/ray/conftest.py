import pytest


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray instance with 2 CPUs for the whole session (chute.ray joins it)."""
    ray = pytest.importorskip("ray", reason="the chute.ray tests need ray[data] (chute[ray])")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")
    from chute.ray._runtime import connect

    connect(None)  # quiets Ray Data as chute does
    yield ray
    ray.shutdown()
