"""Per-sample status codes of decode_batch (0 = ok; any other value: the slot is zero-filled)."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "DecodeStatus", "OK", "CORRUPT", "UNREADABLE", "BOX_OUTSIDE", "NEEDS_PIL", "JPEG_WARNING",
]

OK = 0
CORRUPT = 1
UNREADABLE = 2
BOX_OUTSIDE = 3
# Internal, never returned: the payload is not a JPEG (PIL path), or libjpeg warned about it.
NEEDS_PIL = 100
JPEG_WARNING = 101


class DecodeStatus(IntEnum):
    """What happened to one sample of a batch."""

    OK = OK
    CORRUPT = CORRUPT  # a decoder rejected the payload (corrupt, truncated)
    UNREADABLE = UNREADABLE  # no decoder recognises the payload as an image
    BOX_OUTSIDE = BOX_OUTSIDE  # the crop box does not fit the decoded image size

    def describe(self) -> str:
        return {
            DecodeStatus.OK: "decoded",
            DecodeStatus.CORRUPT: "the image data is corrupt or truncated",
            DecodeStatus.UNREADABLE: "the payload is not an image format chute can read",
            DecodeStatus.BOX_OUTSIDE: (
                "the crop box lies outside the decoded image (stored height/width disagree "
                "with the image)"
            ),
        }[self]
