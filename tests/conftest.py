import multiprocessing
import os
import sys
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _start_method_left_alone():
    """A test that changes the process-wide multiprocessing start method (litdata.optimize
    sets "spawn") must put it back: later tests' DataLoader workers then had to pickle what
    fork hands over."""
    default = multiprocessing.get_all_start_methods()[0]  # what None means (the first use)
    before = multiprocessing.get_start_method(allow_none=True)
    yield
    after = multiprocessing.get_start_method(allow_none=True)
    if (after or default) != (before or default):
        multiprocessing.set_start_method(before, force=True)
        pytest.fail(f"the test changed the multiprocessing start method from {before!r} to "
                    f"{after!r}; restore it (tests/convert/_peers.py, start_method_kept)")


@pytest.fixture(autouse=True)
def _ray_left_alone(request):
    """A test that starts Ray in this process must stop it (`ray_local` does for its module,
    `ray_stopped` after its test): later tests fork, which a process running Ray's threads
    should not, and Ray's processes would hold the 2 cores for the rest of the suite."""
    if "ray_local" in request.fixturenames:
        yield
        return
    before = _ray_running()
    yield
    if _stop_ray_unless(before):
        pytest.fail("the test left Ray running in the pytest process; stop it "
                    "(chute.ray.shutdown() or ray.shutdown()) or use the ray_stopped fixture")


@pytest.fixture
def ray_stopped():
    """For a test whose code may start Ray itself (a docs example that calls
    `ray.data.from_items`, as a script would, which Ray stops at exit): stopped after it."""
    before = _ray_running()
    yield
    _stop_ray_unless(before)


def _ray_running() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def _stop_ray_unless(running_before: bool) -> bool:
    """Stop Ray if it runs now and did not before; whether it was stopped."""
    if running_before or not _ray_running():
        return False
    sys.modules["ray"].shutdown()
    return True


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


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on loopback for the whole session (tests/_s3.py)."""
    pytest.importorskip("moto.server", reason="the object storage tests need moto[server]")
    from tests._s3 import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch, tmp_path):
    """A fresh bucket on the loopback S3 server, with the AWS variables pointing at it and a
    short retry deadline; yields (server, "s3://BUCKET"). A node cache folder is set too."""
    import secrets

    bucket = f"chute-{secrets.token_hex(6)}"
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("CHUTE_S3_RETRY_SECONDS", "20")
    monkeypatch.setenv("CHUTE_DATA_CACHE", str(tmp_path / "node-cache"))
    s3_server.create_bucket(bucket)
    yield s3_server, f"s3://{bucket}"


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance with 2 CPUs for one test module (chute.ray joins it), stopped
    after it: later tests fork processes, which a process running Ray's threads should not."""
    ray = pytest.importorskip("ray", reason="the chute.ray tests need ray[data] (chute[ray])")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")
    from chute.ray._runtime import connect

    connect(None)  # quiets Ray Data as chute does
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def kernel_shim(tmp_path_factory):
    """The kernel source compiled for the CPU through the host shim (skips without g++)."""
    from tests.kernels.shim_build import build_shim

    try:
        return build_shim(tmp_path_factory.mktemp("kernel_shim"))
    except FileNotFoundError as exc:
        pytest.skip(f"cannot build the host shim: {exc}")
