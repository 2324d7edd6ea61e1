"""`chute warmup` and the first-use message of the CPU decoder."""

import pytest

from chute.cli import main
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")


def test_first_use_says_it_compiles_once_then_warmup_marks_it(tmp_path, monkeypatch, capsys):
    import chute.pipelines.producers.image._warmup as warmup
    from chute.pipelines import ImageOptions, Pipeline

    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(warmup, "_noted", set())
    dataset = write_dataset(tmp_path / "ds.chute", n=8)
    for _ in range(2):  # said once per process, not per Pipeline
        image = ImageOptions(size=8, backend="cpu", dtype="uint8", backend_options={"threads": 1})
        with Pipeline(dataset, 4, fields={"image": image, "label": None}, device="cpu", rank=0,
                      world_size=1) as pipe:
            next(iter(pipe))
    assert capsys.readouterr().err.count("compiling the CPU decoder") == 1
    assert main(["warmup"]) == 0
    assert "CPU decoder ready" in capsys.readouterr().out
    monkeypatch.setattr(warmup, "_noted", set())
    for dtype, layout in warmup.VARIANTS:  # compiled: no message in a new process
        warmup.note_first_compile(f"{dtype}-{layout}")
    assert "compiling" not in capsys.readouterr().err


def test_warmup_json(capsys):
    # `chute warmup --json` was refused as an unknown argument; the steps go to stderr
    import json

    from chute.pipelines.producers.image._warmup import VARIANTS

    assert main(["warmup", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["ready"] is True and result["seconds"] >= 0
    assert len(result["steps"]) == len(VARIANTS) and "uint8 NCHW" in captured.err
