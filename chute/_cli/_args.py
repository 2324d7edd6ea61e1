"""Argument types and defaults shared by the `chute` subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["positive", "jpeg_quality", "image_size", "default_device", "EVAL_CROPS"]

# chute.pipelines.producers.image._crops.EVAL_CROPS, spelt out so that building the
# parsers imports no torch (tests/cli/test_args.py checks they agree).
EVAL_CROPS = ("torchvision", "crop-resize")


def positive(kind: type = int) -> Callable[[str], int | float]:
    """An argparse `type` accepting only numbers of `kind` above zero.

    Args:
        kind: int or float.
    """
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def jpeg_quality(text: str) -> int:
    """An argparse `type` for a JPEG quality: a whole number from 1 to 100 (Pillow's scale).

    Args:
        text: the argument, e.g. "95".
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a JPEG quality from 1 to 100, got {text!r}")
    return value


def image_size(text: str) -> int | tuple[int, int]:
    """An argparse `type` for an output size: S (square) or HxW, positive.

    Args:
        text: the argument, e.g. "224" or "224x320".
    """
    parts = text.lower().split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected S or HxW, got {text!r}") from None
    if len(sizes) not in (1, 2) or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected S or HxW with positive sizes, got {text!r}")
    return sizes[0] if len(sizes) == 1 else (sizes[0], sizes[1])


def default_device() -> str:
    """cuda:0 when a CUDA device exists, else cpu."""
    from chute._device import cuda_device_count

    return "cuda:0" if cuda_device_count() > 0 else "cpu"
