"""Reader-specific error types (all subclasses of chute.errors.ChuteError)."""

import numpy as np

from chute.errors import ChuteError

__all__ = ["SampleIndexError", "check_rows"]


class SampleIndexError(ChuteError, IndexError):
    """A sample id outside [0, len(dataset))."""


def check_rows(rows: np.ndarray, num_rows: int, where: str) -> None:
    """Raise SampleIndexError naming `where` and the first row outside [0, num_rows)."""
    if rows.size and (rows.min() < 0 or rows.max() >= num_rows):
        bad = int(rows[(rows < 0) | (rows >= num_rows)][0])
        raise SampleIndexError(f"row {bad} is out of range for {where} ({num_rows} rows)")
