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


def test_bench_json_and_hxw(tmp_path, capsys):
    import json

    dataset = write_dataset(tmp_path / "ds.chute", n=16)
    code = main(["bench", str(dataset), "--batch-size", "4", "--image-size", "12x16",
                 "--epochs", "2", "--backend", "cpu", "--device", "cpu", "--threads", "1",
                 "--dtype", "bfloat16", "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0 and "first epoch" in captured.err
    assert result["image_size"] == [12, 16] and result["dtype"] == "bfloat16"
    assert len(result["images_per_second"]) == 2 and result["steady_images_per_second"] > 0
