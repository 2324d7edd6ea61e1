"""The bound on decoded pixels per image: a few hundred bytes can claim a 65500 x 65500 frame
(a decompression bomb), so a header above it fails its sample before anything of that size is
allocated (docs/design.md, "Decompression bombs")."""

from __future__ import annotations

import os

__all__ = ["MAX_IMAGE_PIXELS", "max_image_pixels"]

# Pillow's refusal bound (twice Image.MAX_IMAGE_PIXELS): about 0.18 gigapixels.
MAX_IMAGE_PIXELS = 178_956_970
_ENV = "CHUTE_MAX_IMAGE_PIXELS"


def max_image_pixels(value: int | None = None) -> int:
    """The largest image (height x width) decoders accept.

    Args:
        value: an explicit bound (e.g. backend_options["max_pixels"]); None takes the
            environment variable CHUTE_MAX_IMAGE_PIXELS, else MAX_IMAGE_PIXELS.

    Raises:
        ValueError: the bound is not a positive integer (the message names its source).
    """
    if value is None:
        text = os.environ.get(_ENV)
        if text is None or not text.strip():
            return MAX_IMAGE_PIXELS
        return _positive(_ENV, text.strip().replace("_", ""))
    return _positive("max_pixels", value)


def _positive(source: str, value: int | float | str) -> int:
    """`value` as a positive int; ValueError naming `source` when it is not one."""
    try:
        bound = int(value)
        ok = bound >= 1 and (not isinstance(value, float) or value == bound)
    except (TypeError, ValueError):
        ok = False
    if not ok or isinstance(value, bool):
        raise ValueError(f"{source} must be a positive whole number of pixels (default "
                         f"{MAX_IMAGE_PIXELS:_}), got {value!r}")
    return bound
