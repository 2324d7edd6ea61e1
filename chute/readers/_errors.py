"""Reader-specific error types (all subclasses of chute.errors.ChuteError)."""

from chute.errors import ChuteError

__all__ = ["SampleIndexError"]


class SampleIndexError(ChuteError, IndexError):
    """A sample id outside [0, len(dataset))."""
