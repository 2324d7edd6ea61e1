"""Per-sample status codes of decode_batch (0 = ok; any other value: the slot is zero-filled)."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "DecodeStatus", "OK", "CORRUPT", "UNREADABLE", "BOX_OUTSIDE", "TOO_LARGE", "SIZE_MISMATCH",
    "GPU_REFUSED", "NEEDS_PIL", "JPEG_WARNING",
]

OK = 0
CORRUPT = 1
UNREADABLE = 2
BOX_OUTSIDE = 3
TOO_LARGE = 4
SIZE_MISMATCH = 5
GPU_REFUSED = 6
# Internal, never returned: the payload is not a JPEG (PIL path), or libjpeg warned about it.
NEEDS_PIL = 100
JPEG_WARNING = 101


class DecodeStatus(IntEnum):
    """What happened to one sample of a batch."""

    OK = OK
    CORRUPT = CORRUPT  # a decoder rejected the payload (corrupt, truncated)
    UNREADABLE = UNREADABLE  # no decoder recognises the payload as an image
    BOX_OUTSIDE = BOX_OUTSIDE  # the crop box does not fit the decoded image size
    TOO_LARGE = TOO_LARGE  # the header claims more pixels than the bound (max_image_pixels)
    SIZE_MISMATCH = SIZE_MISMATCH  # the header's size is not the one the caller expects
    GPU_REFUSED = GPU_REFUSED  # none of a GPU backend's decoders decodes it (no CPU decode)

    def describe(self) -> str:
        return {
            DecodeStatus.OK: "decoded",
            DecodeStatus.CORRUPT: "the image data is corrupt or truncated",
            DecodeStatus.UNREADABLE: "the payload is not an image format chute can read",
            DecodeStatus.BOX_OUTSIDE: (
                "the crop box lies outside the decoded image (stored height/width disagree "
                "with the image)"
            ),
            DecodeStatus.TOO_LARGE: (
                "the image header claims more pixels than the bound (CHUTE_MAX_IMAGE_PIXELS, "
                "backend_options['max_pixels']): a decompression bomb, or raise the bound"
            ),
            DecodeStatus.SIZE_MISMATCH: (
                "the image header's size disagrees with the dataset's height/width columns"
            ),
            DecodeStatus.GPU_REFUSED: (
                "no GPU decoder decodes it (e.g. not a baseline or progressive JPEG); "
                "backend_options={'cpu_fallback': True} decodes such images on the CPU"
            ),
        }[self]
