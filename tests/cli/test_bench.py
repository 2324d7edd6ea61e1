import pytest

from chute.cli import main
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")


def test_bench_prints_rates_per_epoch(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "ds.chute", n=20)
    code = main(["bench", str(dataset), "--batch-size", "4", "--image-size", "16",
                 "--epochs", "2", "--backend", "cpu", "--device", "cpu", "--threads", "1",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "first epoch" in out and "epoch 1" in out and "img/s" in out
    assert "20 images" in out
