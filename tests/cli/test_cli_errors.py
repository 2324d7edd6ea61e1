"""Issue 26 item 6: CLI mistakes of `chute show` and `chute bench` are one line on stderr and
exit 1, never a traceback."""

import pytest

from chute.cli import main
from chute.convert import ShardWriter
from tests.pipelines._pipeline_data import write_dataset


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(tmp_path / "ds.chute", n=6, meta=False)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--out", "nodir/x.png"], "folder"),  # FileNotFoundError after all the work
    (["--out", "x.png", "--field", "label"], "--field label: not an image field"),
    (["--out", "x.png", "--field", "nope"], "--field nope: not an image field"),
    (["--out", "x.png", "--count", "2", "--image-size", "8", "--augment", "train",
      "--field", "image", "--epoch", "0"], None),
])
def test_show_mistakes_are_one_line(dataset, tmp_path, capsys, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)
    code = main(["show", str(dataset), *argv])
    if expected is None:
        assert code == 0 and (tmp_path / "x.png").exists()
        return
    assert code == 1 and expected in _one_line_error(capsys)
    assert not (tmp_path / "x.png").exists()


def test_show_on_a_video_dataset_says_it_draws_images(tmp_path, capsys):
    with ShardWriter(tmp_path / "v.chute", {"video": {"kind": "bytes", "media": "video"},
                                             "label": "int64"}) as writer:
        writer.write({"video": b"not really a video", "label": 1})
    assert main(["show", str(tmp_path / "v.chute"), "--out", str(tmp_path / "x.png")]) == 1
    assert "has no image field" in _one_line_error(capsys)


def test_bench_batch_larger_than_the_dataset_is_one_line(dataset, capsys):
    assert main(["bench", str(dataset), "--batch-size", "1000", "--epochs", "1",
                 "--backend", "cpu", "--device", "cpu", "--no-progress"]) == 1
    error = _one_line_error(capsys)
    # the CLI's option, not the Pipeline's drop_last=False, which chute bench has no flag for
    assert "--batch-size 1000 is more than" in error and "drop_last" not in error


@pytest.mark.parametrize("argv", [["convert", "video", "{folder}", "{out}"],
                                  ["convert", "csv", "{folder}", "{out}"],
                                  ["meta", "update", "{dataset}", "{folder}"]])
def test_a_folder_where_a_listing_is_expected_is_one_line(tmp_path, capsys, argv):
    """Issue 38 item 11: IsADirectoryError was a traceback."""
    (tmp_path / "listing").mkdir()
    with_meta = write_dataset(tmp_path / "meta.chute", n=3, meta=True)
    values = {"folder": str(tmp_path / "listing"), "out": str(tmp_path / "out.chute"),
              "dataset": str(with_meta)}
    assert main([a.format(**values) for a in argv]) == 1
    error = _one_line_error(capsys)
    assert f"{tmp_path / 'listing'}: a folder where a file is expected" in error
    assert not (tmp_path / "out.chute").exists()


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("argv", [["info", "{dataset}"], ["info", "{dataset}", "--json"],
                                  ["--help"]])
def test_a_closed_stdout_exits_quietly(dataset, argv):
    """Issue 38 item 11, issue 37: `chute info X | head -1` gave BrokenPipeError and exit 1;
    now nothing on stderr and the status a shell reports for a tool the pipe stopped."""
    import subprocess
    import sys

    command = subprocess.Popen(
        [sys.executable, "-c", "import sys; from chute.cli import main; "
         "sys.exit(main(sys.argv[1:]))", *[a.format(dataset=dataset) for a in argv]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert command.stdout is not None and command.stderr is not None
    command.stdout.close()  # the reader goes away before anything is written
    err = command.stderr.read().decode()
    # argparse itself drops a failed write of --help (exit 0)
    assert command.wait(timeout=120) == (0 if argv == ["--help"] else 141) and err == ""
