"""Where chute keeps what it computes once per machine (autotune decisions, the built ROI
decoder): $CHUTE_CACHE_DIR, else $XDG_CACHE_HOME/chute, else ~/.cache/chute."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """chute's cache folder: $CHUTE_CACHE_DIR, else $XDG_CACHE_HOME/chute, else
    ~/.cache/chute (autotune decisions, compiled kernels)."""
    if os.environ.get("CHUTE_CACHE_DIR"):
        return Path(os.environ["CHUTE_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "chute"
    return Path.home() / ".cache" / "chute"
