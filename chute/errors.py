"""The errors chute raises. Every message names the input, what is wrong and what to do."""

__all__ = [
    "ChuteError",
    "FormatError",
    "DecodeError",
    "BackendUnavailableError",
    "DiskFullError",
]


class ChuteError(Exception):
    """Base class of every error chute raises on purpose."""


class FormatError(ChuteError, ValueError):
    """A dataset file is missing, truncated, foreign or inconsistent with the manifest."""


class DecodeError(ChuteError):
    """A sample could not be decoded (corrupt or truncated payload)."""


class BackendUnavailableError(ChuteError, RuntimeError):
    """A backend was asked for that cannot run here (no CUDA device, DALI missing, ...)."""


class DiskFullError(ChuteError, OSError):
    """A write found the disk full (errno ENOSPC); what was being written was removed."""
