"""The image output types every backend writes: layouts and dtypes, checked in one place.

A bottom-layer module: it imports only NumPy. torch dtypes are recognised without importing
torch (a torch dtype can only exist once torch is imported), and `torch_dtype` imports torch
only when called.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import numpy as np

__all__ = [
    "Layout",
    "LAYOUTS",
    "OUTPUT_DTYPES",
    "check_layout",
    "output_dtype",
    "numpy_dtype",
    "torch_dtype",
    "image_batch_shape",
    "image_size_of",
]

Layout = Literal["NCHW", "NHWC"]
LAYOUTS: tuple[Layout, ...] = ("NCHW", "NHWC")
OUTPUT_DTYPES = ("uint8", "float16", "float32")


def check_layout(layout: object, where: str = "layout") -> Layout:
    """`layout` if it is "NCHW" or "NHWC".

    Args:
        layout: the value to check.
        where: how the error names the argument (e.g. "ImageOptions(layout=...)").

    Returns:
        The layout, unchanged.

    Raises:
        ValueError: for any other value, naming `where` and the accepted layouts.
    """
    if isinstance(layout, str) and layout in LAYOUTS:
        return layout  # `in` a tuple of Literals narrows the str to Layout
    raise ValueError(
        f"{where} must be 'NCHW' ([B, 3, H, W]) or 'NHWC' ([B, H, W, 3]), got {layout!r}; "
        "pass one of those two strings"
    )


def _torch_dtype_name(value: object) -> str | None:
    """'float16' for torch.float16 and so on; None when `value` is not a torch dtype."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.dtype):
        return None
    return str(value).removeprefix("torch.")


def output_dtype(value: Any, where: str = "dtype") -> str:
    """The canonical name ("uint8", "float16" or "float32") of an output dtype.

    Args:
        value: a name ("uint8", "float16", "float32"), a NumPy dtype or scalar type
            (np.float16, np.dtype("uint8")) or a torch dtype (torch.float16).
        where: how the error names the argument (e.g. "out.dtype").

    Returns:
        The dtype's name, one of OUTPUT_DTYPES.

    Raises:
        ValueError: for any other dtype or value, naming `where` and the accepted dtypes.
    """
    name = _torch_dtype_name(value)
    if name is None and isinstance(value, str):
        name = value
    elif name is None:
        try:
            name = np.dtype(value).name
        except TypeError:
            name = None
    if name in OUTPUT_DTYPES:
        return name
    raise ValueError(
        f"{where} must be uint8, float16 or float32 (as a name, a NumPy dtype or a torch "
        f"dtype), got {value!r}; use one of those three"
    )


def numpy_dtype(value: Any, where: str = "dtype") -> np.dtype:
    """The NumPy dtype of an output dtype given in any form `output_dtype` accepts.

    Args:
        value: the dtype as a name, NumPy dtype or torch dtype.
        where: how an error names the argument.
    """
    return np.dtype(output_dtype(value, where))


def torch_dtype(value: Any, where: str = "dtype") -> Any:
    """The torch dtype of an output dtype given in any form `output_dtype` accepts.

    Imports torch (only this function does).

    Args:
        value: the dtype as a name, NumPy dtype or torch dtype.
        where: how an error names the argument.
    """
    import torch

    return getattr(torch, output_dtype(value, where))


def image_batch_shape(batch: int, height: int, width: int,
                      layout: str) -> tuple[int, int, int, int]:
    """The shape of an image batch: (B, 3, H, W) for "NCHW", (B, H, W, 3) for "NHWC".

    Args:
        batch: samples in the batch.
        height, width: output image size.
        layout: "NCHW" or "NHWC".
    """
    if check_layout(layout) == "NCHW":
        return (batch, 3, height, width)
    return (batch, height, width, 3)


def image_size_of(shape: tuple[int, ...], layout: str,
                  where: str = "the output") -> tuple[int, int]:
    """(H, W) of an image batch of this shape and layout, which must hold 3 channels.

    Args:
        shape: the batch's shape, four dimensions.
        layout: "NCHW" or "NHWC".
        where: how the error names the batch (e.g. "decode_batch(out=...)").

    Returns:
        The images' height and width.

    Raises:
        ValueError: when the shape is not a 4-D batch with 3 channels in that layout.
    """
    shape = tuple(int(s) for s in shape)
    nchw = check_layout(layout) == "NCHW"
    if len(shape) != 4 or shape[1 if nchw else 3] != 3:
        expected = "[B, 3, H, W]" if nchw else "[B, H, W, 3]"
        raise ValueError(f"{where} must be a {layout} image batch, {expected} with 3 channels, "
                         f"got shape {shape}; allocate it as {expected} or pass its layout")
    return (shape[2], shape[3]) if nchw else (shape[1], shape[2])
