"""Machine-readable output shared by the commands' `--json` flags."""

from __future__ import annotations

import json
import sys

__all__ = ["add_json_flag", "print_json"]


def add_json_flag(parser) -> None:
    """Register `--json` on a command's parser."""
    parser.add_argument("--json", action="store_true",
                        help="print one machine-readable JSON object on stdout (messages that "
                        "are not results go to stderr)")


def print_json(obj) -> None:
    """`obj` as indented JSON on stdout (paths and other objects as strings)."""
    json.dump(obj, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
