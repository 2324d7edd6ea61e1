import pickle

import pytest
import torch

from chute.infer import InferConfig, InferServer, StageConfig, run_bulk
from chute.infer._cuda_ipc import CudaShared, on_cuda, pack, to_host, unpack


@pytest.mark.slow
def test_tensors_cross_in_shared_memory_and_a_bad_cuda_handle_fails_alone(leak_check):
    config = InferConfig([StageConfig("make", "tests.infer._stages:bad_handle", max_batch=4),
                          StageConfig("look", "tests.infer._stages:is_shared", max_batch=4)])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 2, 3, 4], timeout=60)
        pids = server.pids
    assert [r.input for r in run.requests] == [1, 2, 3, 4]
    (bad,) = [r for r in run.requests if not r.ok]
    assert bad.input == 3 and "stage look: its CUDA input cannot be opened" in bad.error
    # the consumer saw the producer's tensors in shared memory, not unpickled copies
    assert [float(r.output) for r in run.requests if r.ok] == [1.0, 1.0, 1.0]
    # and the client's outputs no longer map it
    assert not any(r.output.is_shared() for r in run.requests if r.ok)
    del run
    leak_check(pids)


def test_cpu_outputs_pass_through_pack_and_to_host_unchanged():
    out = {"x": [torch.ones(2), torch.zeros(1)], "n": 3}
    for fn in (pack, to_host):
        moved = fn(out)
        assert moved["n"] == 3 and moved["x"][0] is out["x"][0]
    assert on_cuda(["cpu", "cuda:1"]) and not on_cuda(["cpu"])


def test_unpack_opens_handles_wherever_they_are_nested():
    # a CPU tensor pickled stands in for a CUDA handle: unpack only unpickles what it finds
    handle = CudaShared(pickle.dumps(torch.arange(3)))
    opened = unpack([{"a": (handle, 5)}, handle])
    assert torch.equal(opened[0]["a"][0], torch.arange(3)) and opened[0]["a"][1] == 5
    assert torch.equal(opened[1], torch.arange(3))


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_outputs_reach_the_next_gpu_stage_by_ipc(leak_check):
    initialised = torch.cuda.is_initialized()
    config = InferConfig([
        StageConfig("up", "tests.infer._stages:to_cuda", devices=["cuda:0"], max_batch=2),
        StageConfig("where", "tests.infer._stages:where", devices=["cuda:0"], max_batch=2)])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 2, 3, 4, 5], timeout=120)
        pids = server.pids
    assert run.failed == 0
    # each value arrived doubled and still on the GPU; the parent never touched CUDA
    assert [r.output.tolist() for r in run.requests] == [[2.0 * k, 1.0] for k in range(1, 6)]
    assert torch.cuda.is_initialized() == initialised
    del run
    leak_check(pids)


@pytest.mark.slow
@pytest.mark.gpu
def test_a_last_gpu_stage_hands_cpu_outputs_to_the_client():
    config = InferConfig([StageConfig("up", "tests.infer._stages:to_cuda",
                                      devices=["cuda:0"], max_batch=2)])
    with InferServer(config) as server:
        run = run_bulk(server, [1, 2, 3], timeout=120)
    assert [r.output.device.type for r in run.requests] == ["cpu"] * 3
    assert [float(r.output) for r in run.requests] == [2.0, 4.0, 6.0]
