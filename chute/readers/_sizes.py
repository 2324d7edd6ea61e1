"""Human byte sizes: "1GiB", "64MB", "500k", "1048576"."""

from __future__ import annotations

import re

__all__ = ["parse_size", "format_size"]

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in `text`; KB/MB/GB are powers of 1000, K/M/G and KiB/MiB/GiB powers of 1024."""
    if isinstance(text, int):
        return text
    match = _PATTERN.match(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or not unit:
        raise ValueError(f"cannot read size {text!r}; write e.g. 1GiB, 512MiB, 64MB or 1000000")
    value = int(float(match.group(1)) * unit)
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


def format_size(n: int) -> str:
    """A byte count for people: "512 B", "1.50 KiB", ... "3.20 GiB".

    Args:
        n: bytes.
    """
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
