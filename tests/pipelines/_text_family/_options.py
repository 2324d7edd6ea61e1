"""TextOptions: how a text field is delivered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TextOptions:
    """Args:
        max_len: bytes per sample (longer texts fail the sample; shorter ones are zero-padded).
        upper: deliver the text upper-cased.
        unit: "text" (one sample per row) or "word" (each word of each row is a sample).
        backend: "test-text" (written on the host), "test-text-device" (written by the
            producer into the device tensor itself) or "auto" (measured, the faster one).
    """

    max_len: int = 16
    upper: bool = False
    unit: Literal["text", "word"] = "text"
    backend: str = "test-text"
