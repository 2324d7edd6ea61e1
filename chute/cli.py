"""The `chute` command. Each subcommand lives in its own module under chute/_cli/ and exposes
`add_parser(subparsers)`, which registers its parser and sets `func=run` on it."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from typing import NoReturn

from chute.errors import ChuteError

__all__ = ["main", "build_parser"]

# Module names under chute/_cli/, in the order `chute --help` lists them.
_COMMANDS = ("convert", "info", "verify", "meta", "show", "bench", "autotune", "warmup",
             "demo", "infer_bench")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, exit status 2 (every subcommand's parser is one of
    these: subparsers take their parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} "
                     "--help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chute",
        description="Feed PyTorch training with decoded, augmented batches (images, video "
        "clips, audio segments, latents and other arrays): convert data to chute shards, "
        "inspect and verify them, benchmark and autotune pipelines, load-test inference.",
    )
    from chute import __version__

    parser.add_argument("--version", action="version", version=f"chute {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"chute._cli.{name}").add_parser(sub)
    return parser


# the commands whose DST is a dataset, read or written (s3:// allowed)
_DST_COMMANDS = ("convert", "convert-audio", "info", "verify")
# the arguments that name files or folders, in any command
_PATH_ARGS = ("src", "dst", "dataset", "out", "workdir", "config")


def _refuse_urls(args) -> None:
    """A URL other than file:// names no place chute can read or write, except `s3://` for a
    dataset read (info, verify, bench, show, autotune, infer-bench) or written (convert's
    DST): refuse it before anything is created (a destination s3://b/x became a folder
    "s3:")."""
    from chute.readers import is_remote, local_path

    for name in _PATH_ARGS:
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and "://" in value:
                if is_remote(value) and (name == "dataset" or (name == "dst" and args.command
                                                               in _DST_COMMANDS)):
                    continue
                written = name in ("out", "workdir") or (name, args.command) == ("dst", "convert")
                local_path(value, writing=written)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse's --help, --version and usage errors write first
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a closed stdout fails here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        # the reader went away (`chute info X | head -1`): exit quietly, as Unix tools do,
        # with stdout on /dev/null so that the interpreter's last flush does not fail again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a tool the pipe stopped


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _refuse_urls(args)
        try:
            return int(args.func(args) or 0)
        finally:
            _stop_ray()
    except ChuteError as exc:
        # one line, whatever the message holds: scripts grep it, and no traceback
        print(f"chute {args.command}: error: {' '.join(str(exc).splitlines())}",
              file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # main's: an OSError, but not the user's to fix
    except IsADirectoryError as exc:  # e.g. `convert csv FOLDER`, `meta update DST FOLDER`
        print(f"chute {args.command}: error: {exc.filename}: a folder where a file is "
              "expected (a CSV, a JSONL listing); name the file itself", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a full disk is the user's to fix, not a bug: one line, as for a ChuteError
        where = exc.filename or getattr(args, "dst", None) or getattr(args, "out", None) or \
            getattr(args, "dataset", None) or "the output"
        print(f"chute {args.command}: error: {where}: no space left on device while writing "
              "it; free space or write elsewhere", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _stop_ray() -> None:
    """A Ray instance the command started stops before it ends, not in an exit hook that a
    signal can interrupt (docs/ray.md)."""
    if "ray" in sys.modules:
        from chute.ray import shutdown

        shutdown()


if __name__ == "__main__":
    sys.exit(main())
