"""A dataset whose manifest lacks the columns its images, videos or audio units need is a
FormatError (a chute error the CLI reports in one line), not a plain ValueError (issue 11,
defect 9)."""

import json

import pytest

from chute import AudioOptions, ImageOptions, Pipeline
from chute.errors import FormatError
from tests.pipelines._pipeline_data import write_dataset


@pytest.mark.parametrize("column", ["height", "width"])
def test_image_dataset_without_size_column(tmp_path, column):
    root = write_dataset(tmp_path / "d.chute", n=6)
    manifest = json.loads((root / "chute.json").read_text())
    del manifest["fields"][column]
    (root / "chute.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=f"no \\['{column}'\\] column"):
        Pipeline(str(root), 2, fields={"image": ImageOptions(size=16, backend="cpu"),
                                       "label": None}, augment="eval")


@pytest.mark.parametrize("column", ["num_frames", "sample_rate"])
def test_audio_dataset_without_unit_column(tmp_path, column):
    pytest.importorskip("soundfile")
    from tests._audio import convert_recordings

    root = convert_recordings(tmp_path, names=("a.wav",))
    manifest = json.loads((root / "chute.json").read_text())
    del manifest["fields"][column]
    (root / "chute.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=f"no \\['{column}'\\] column"):
        Pipeline(str(root), 2, fields={"audio": AudioOptions(unit="segment", sample_rate=16000)})


@pytest.mark.parametrize("meta", [None, ["a list"], {"segments": "not a list"},
                                  {"segments": [{"start": 0.1, "end": float("inf")}]}])
def test_audio_segments_malformed(tmp_path, meta):
    """A missing or malformed segment list raised KeyError / AttributeError / OverflowError."""
    pytest.importorskip("soundfile")
    from chute.convert._meta_update import _rewrite
    from chute.readers import open_dataset
    from tests._audio import convert_recordings

    root = convert_recordings(tmp_path, names=("a.wav",))
    if meta is None:
        manifest = json.loads((root / "chute.json").read_text())
        del manifest["fields"]["meta"]
        (root / "chute.json").write_text(json.dumps(manifest))
    else:
        _rewrite(open_dataset(root), "meta", [meta])  # the recording's metadata record
    with pytest.raises(FormatError, match="recording 0|no \\['meta'\\]"):
        Pipeline(str(root), 2, fields={"audio": AudioOptions(unit="segment", sample_rate=16000)})
