"""The argument types the `chute` subcommands share (chute/_cli/_args.py)."""

import argparse

import pytest

from chute._cli._args import image_size, positive
from chute.cli import main


def test_positive_numbers():
    assert positive(int)("3") == 3 and positive(float)("0.5") == 0.5
    for kind, text, message in [(int, "0", "must be positive, got 0"),
                                (int, "-2", "must be positive, got -2"),
                                (int, "1.5", "expected a whole number, got '1.5'"),
                                (float, "x", "expected a number, got 'x'")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            positive(kind)(text)


def test_image_size():
    assert image_size("224") == 224 and image_size("224x320") == (224, 320)
    for text in ("0", "1x2x3", "big", "4x-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected S or HxW"):
            image_size(text)


@pytest.mark.parametrize("argv", [
    ["convert", "imagefolder", "src", "dst", "--workers", "0"],
    ["bench", "ds", "--batch-size", "0"],
    ["demo", "--epochs", "-1"],
])
def test_every_command_rejects_non_positive_counts(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_eval_crop_choices_are_the_pipelines():
    from chute._cli._args import EVAL_CROPS
    from chute.pipelines.producers.image._crops import EVAL_CROPS as PIPELINE_EVAL_CROPS

    assert EVAL_CROPS == PIPELINE_EVAL_CROPS


@pytest.mark.parametrize("argv", [
    ["convert", "imagefolder"],
    ["convert", "imagefolder", "src", "dst", "--engine", "spark"],
    ["convert", "csv", "x.csv", "dst", "--shard-size", "12XB"],
    ["nope"],
    ["info"],
])
def test_a_usage_error_is_one_line_exit_2_naming_the_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error:" in err and "--help`" in err


@pytest.mark.parametrize(("argv", "words"), [
    # issue 38 item 12: each was accepted, leaked "invalid literal for int()", exited 1 with
    # a broken sentence, or pointed to `chute --help`
    (["convert", "imagefolder", "src", "dst", "--engine", "ray", "--ray-address", "bogus"],
     "argument --ray-address: expected auto, HOST:PORT or ray://HOST:PORT"),
    (["convert", "imagefolder", "src", "dst", "--task-size", "4"],
     "--task-size applies only with --engine ray; add --engine ray, or leave --task-size out "
     "(see `chute convert imagefolder --help`)"),
    (["convert", "video", "x.csv", "dst", "--ray-address", "auto", "--task-size", "4"],
     "--ray-address and --task-size apply only with --engine ray; add --engine ray, or leave "
     "them out"),
    (["convert", "imagefolder", "src", "dst", "--engine", "ray", "--workers", "2"],
     "--workers does not apply with --engine ray: each Ray task uses one CPU"),
    (["info", "x.chute", "--jsn"],
     "chute info: error: unrecognized arguments: --jsn; did you mean --json? (see `chute info "
     "--help`)"),
    (["convert", "csv", "x.csv", "dst", "--quality", "300"],
     "argument --quality: expected a JPEG quality from 1 to 100, got '300'"),
    (["convert", "imagefolder", "src", "dst", "--quality", "0"],
     "argument --quality: expected a JPEG quality from 1 to 100, got '0'"),
])
def test_options_are_checked_as_usage_errors_naming_the_commands_help(argv, words, capsys,
                                                                      tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert f"`chute {' '.join(a for a in argv[:2] if not a.endswith('.chute'))}" in err \
        or "`chute info --help`" in err
    assert not (tmp_path / "dst").exists()


def test_ray_addresses_of_every_documented_form_are_accepted():
    from chute._cli._engine import ray_address

    for address in ("auto", "10.0.0.5:6379", "head:6379", "ray://head:10001", "[::1]:6379"):
        assert ray_address(address) == address


def test_the_help_says_what_chute_converts_beyond_images(capsys):
    # `chute --help` and `chute convert --help` said images only (a CSV of image paths)
    for argv in (["--help"], ["convert", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())
        assert "video" in out and "audio" in out and "zarr" in out.lower(), argv


@pytest.mark.parametrize("argv, words", [(["bench", "--help"], ["nvimgcodec", "zarr group"]),
                                         (["info", "--help"], ["zarr group"]),
                                         (["verify", "--help"], ["zarr group"])])
def test_the_helps_name_every_backend_and_source(capsys, argv, words):
    # bench's --backend left out nvimgcodec; info and verify named no zarr group as DST
    with pytest.raises(SystemExit):
        main(argv)
    out = " ".join(capsys.readouterr().out.split())
    assert all(word in out for word in words), (argv, words)
