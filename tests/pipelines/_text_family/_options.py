"""TextOptions: how a text field is delivered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextOptions:
    """Args:
        max_len: bytes per sample (longer texts fail the sample; shorter ones are zero-padded).
        upper: deliver the text upper-cased.
    """

    max_len: int = 16
    upper: bool = False
