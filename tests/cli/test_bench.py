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
    # which stage bounds the run, what it cost, and whether the ROI decoder was built
    assert "stages (epochs after the first):" in out and "  decode+resample " in out
    assert "CPU core-seconds per 1,000 images:" in out
    assert "cpu backend ROI decoder: " in out


@pytest.mark.slow
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
    assert len(result["cpu_seconds_per_1000"]) == 2 and result["threads"] == 1
    assert result["stages"]["image"]["count"] == 4  # the second epoch's batches
    assert result["roi_decoder"].startswith(("built", "unavailable"))


def test_bench_latents_with_a_lookup(tmp_path, capsys):
    pytest.importorskip("zarr")
    from tests.readers._zarr_stores import latents_values, write_store

    store = write_store(tmp_path / "x.zarr", latents_values(30, 4), chunk=4)
    code = main(["bench", str(store), "--batch-size", "8", "--epochs", "2", "--device", "cpu",
                 "--augment", "eval", "--fields", "base_frames", "clip_emb",
                 "--lookup", "clip_emb=segment_to_video", "--sample-array", "base_frames",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    # no image field: the header names the fields, not an image size and dtype that do not
    # apply, and the rates count samples
    assert "backend none (no image field)" in out and "30 samples" in out
    assert "fields base_frames, clip_emb eval" in out and "samples/s" in out
    assert "px" not in out and "img/s" not in out and "backend choice" not in out


def test_bench_lookup_needs_table_equals_index(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", str(tmp_path), "--lookup", "clip_emb"])
    assert "TABLE=INDEX" in capsys.readouterr().err

