"""The `chute` command. Each subcommand lives in its own module under chute/_cli/ and exposes
`add_parser(subparsers)`, which registers its parser and sets `func=run` on it."""

from __future__ import annotations

import argparse
import difflib
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


# the commands whose DST is a dataset, read or written (s3://, gs://, az:// allowed)
_DST_COMMANDS = ("convert", "convert-audio", "info", "verify")
# the arguments that name files or folders, in any command
_PATH_ARGS = ("src", "dst", "dataset", "out", "workdir", "config")


def _refuse_urls(args) -> None:
    """A URL other than file:// names no place chute can read or write, except object storage
    (`s3://`, `gs://`, `az://`, `abfs://`) for a dataset read (info, verify, bench, show,
    autotune, infer-bench) or written (convert's DST): refuse it before anything is created (a
    destination s3://b/x became a folder "s3:")."""
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
    args, unknown = parser.parse_known_args(argv)
    command = _command_parser(parser, args)
    if unknown:  # told by the command's parser: `chute info --jsn` points to `chute info --help`
        near = difflib.get_close_matches(unknown[0].split("=")[0], _options(command), n=1)
        command.error(f"unrecognized arguments: {' '.join(unknown)}"
                      + (f"; did you mean {near[0]}?" if near else ""))
    problem = getattr(args, "check_usage", lambda _: None)(args)
    if problem:  # a usage error found across options, e.g. --task-size without --engine ray
        command.error(problem)
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


def _command_parser(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` chose, e.g. `chute convert imagefolder`'s."""
    while True:
        chosen = [action.choices[getattr(args, action.dest)] for action in parser._actions
                  if isinstance(action, argparse._SubParsersAction)
                  and getattr(args, action.dest, None) in (action.choices or {})]
        if not chosen:
            return parser
        parser = chosen[0]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def _stop_ray() -> None:
    """A Ray instance the command started stops before it ends, not in an exit hook that a
    signal can interrupt (docs/ray.md)."""
    if "ray" in sys.modules:
        from chute.ray import shutdown

        shutdown()


if __name__ == "__main__":
    sys.exit(main())
