"""`chute info DST --buckets CONFIG`: how a video dataset's clips fall into a Buckets config
(the counts the Pipeline warns about), in text and --json (issue 27 item 3)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("av")

from chute.cli import main  # noqa: E402
from chute.pipelines import Buckets  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import convert_videos, make_video  # noqa: E402

# video k: (frames, height, width); 32x48 at 16 frames (interval 2 spans 31 frames) fits
# only 1 and 3; video 0 is too small for 32x48, video 2 too short
VIDEOS = [(40, 16, 24), (40, 32, 48), (20, 32, 48), (36, 32, 48)]
CONFIG = {"32x48": {"16": [1.0, 1]}}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("buckets")
    return convert_videos(folder, [(f"v{k}.mp4", make_video(n=n, height=h, width=w, gop=6))
                                   for k, (n, h, w) in enumerate(VIDEOS)])


def _info(capsys, *argv):
    code = main(["info", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json_gives_the_pipelines_bucket_summary(videos, tmp_path, capsys):
    config = tmp_path / "buckets.json"
    config.write_text(json.dumps(CONFIG))
    code, out, _ = _info(capsys, videos, "--json", "--buckets", config, "--frame-interval", 2)
    assert code == 0
    got = json.loads(out)["buckets"]
    want = Buckets(CONFIG).summary(open_dataset(videos), frame_interval=2)
    assert {k: got[k] for k in want} == want
    assert sum(got["buckets"].values()) == 2 and sum(got["excluded"].values()) == 2
    assert list(got["examples"].values()) == [[0], [2]]
    assert got["frame_interval"] == 2 and got["tolerance"] == 1.0 and got["seed"] == 0


def test_info_text_shows_filled_buckets_and_exclusions(videos, capsys):
    code, out, _ = _info(capsys, videos, "--buckets", json.dumps(CONFIG),
                         "--frame-interval", 2)
    assert code == 0
    lines = out.splitlines()
    assert any(line.startswith("buckets") and "2 of 4 samples" in line for line in lines)
    assert any("32x48/16f" in line and line.rstrip().endswith(" 2") for line in lines)
    assert any(line.startswith("excluded") and "smaller than" in line and "ids 0" in line
               for line in lines)
    assert any("fewer frames" in line and "ids 2" in line for line in lines)
    # a tolerance lets the smaller video in (24 x 16 px is 1/4 of 32 x 48's budget)
    code, out, _ = _info(capsys, videos, "--buckets", json.dumps(CONFIG),
                         "--frame-interval", 2, "--tolerance", 0.25)
    assert code == 0 and "3 of 4 samples" in out


def test_info_without_buckets_computes_none(videos, capsys):
    code, out, _ = _info(capsys, videos, "--json")
    assert code == 0 and "buckets" not in json.loads(out)


@pytest.mark.parametrize("config,message", [
    ("{not json", "is neither a JSON file nor JSON"),
    ('{"32x48": {"16": [2.0, 1]}}', "keep must be in"),
])
def test_a_bad_config_is_one_line(videos, capsys, config, message):
    code, out, err = _info(capsys, videos, "--buckets", config)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "--buckets" in err


def test_buckets_on_a_dataset_without_video_columns_is_refused(tmp_path, capsys):
    from tests.pipelines._pipeline_data import write_dataset

    path = write_dataset(tmp_path / "img.chute", n=4)
    code, _, err = _info(capsys, path, "--buckets", json.dumps(CONFIG))
    assert code == 2 and "num_frames" in err and "chute convert video" in err
    assert len(err.strip().splitlines()) == 1
