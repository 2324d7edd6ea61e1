import os

import pytest
import torch

from chute.infer import InferConfig, InferServer, StageConfig, run_bulk
from tests.infer.conftest import EXAMPLES

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)


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


@pytest.mark.gpu
def test_bench_infer_runs_the_model_on_the_gpus(tmp_path):
    import subprocess
    import sys

    from tests._video_media import make_video

    pytest.importorskip("av")
    root = EXAMPLES.parent
    for k in range(2):
        (tmp_path / f"v{k}.mp4").write_bytes(make_video(24, 64, 64))
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks/bench_infer.py"), "--videos", str(tmp_path),
         "--requests", "6", "--search-requests", "4", "--budget-s", "5", "--rates", "1"],
        capture_output=True, text=True, timeout=900, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert "model devices: (a) cuda:0, (b) cuda:0" in out.stdout
    assert "| 1 |" in out.stdout
