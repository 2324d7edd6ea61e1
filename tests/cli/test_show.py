"""`chute show`: the PNG's tiles are the Pipeline's own output for those indices."""

import numpy as np
import pytest
from PIL import Image

from chute.cli import main
from chute.pipelines import ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")


@pytest.mark.slow
def test_show_tiles_equal_the_pipeline(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "ds.chute", n=10, sizes=(30, 50))
    out = tmp_path / "grid.png"
    assert main(["show", str(dataset), "--out", str(out), "--count", "6", "--image-size",
                 "20x24", "--augment", "train", "--epoch", "2", "--seed", "5"]) == 0
    assert "wrote 6 samples" in capsys.readouterr().out
    grid = np.asarray(Image.open(out).convert("RGB"))
    from chute._cli.show import CAPTION_HEIGHT

    image = ImageOptions(size=(20, 24), backend="cpu", dtype="uint8", layout="NHWC")
    with Pipeline(dataset, 6, fields={"image": image}, augment="train", device="cpu", seed=5,
                  rank=0, world_size=1) as pipe:
        pipe.set_epoch(2)
        images = next(iter(pipe))["image"].numpy()
    cols = 3
    for k in range(6):
        top, left = (k // cols) * (20 + CAPTION_HEIGHT), (k % cols) * 24
        assert np.array_equal(grid[top:top + 20, left:left + 24], images[k])
    assert grid.shape == (2 * (20 + CAPTION_HEIGHT), 3 * 24, 3)


def test_show_json_says_what_it_drew(tmp_path, capsys):
    # `chute show --json` was refused as an unknown argument
    import json

    dataset = write_dataset(tmp_path / "ds.chute", n=5, sizes=(30, 50))
    out = tmp_path / "grid.png"
    capsys.readouterr()
    assert main(["show", str(dataset), "--out", str(out), "--count", "4", "--image-size", "16",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == 4 and result["grid"] == [2, 2] and result["tile"] == [16, 16]
    assert len(result["indices"]) == 4 and out.exists()
