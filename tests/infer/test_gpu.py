import pytest
import torch

from chute.infer import InferConfig, InferServer, StageConfig, run_bulk
from tests.infer.conftest import EXAMPLES


@pytest.mark.gpu
def test_a_model_stage_on_cuda_gives_the_cpu_outputs(video_dataset):
    loader = {"num_frames": 8, "size": 32}
    stages = [StageConfig("decode", "chute.infer:VideoClipLoader", options=loader),
              StageConfig("model", "video_classifier.py:build", options={"seed": 1},
                          devices=["cuda:0"], max_batch=4, max_wait_ms=20)]
    config = InferConfig(stages, dataset=str(video_dataset), base=str(EXAMPLES))
    cpu = config.replace("model", devices=["cpu"])
    outputs = []
    for c in (config, cpu):
        with InferServer(c) as server:
            run = run_bulk(server, [0, 1, 2, 3], timeout=120)
        assert run.failed == 0
        outputs.append(torch.stack([r.output for r in run.requests]))
    assert outputs[0].device.type == "cpu"
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-3, atol=1e-3)
