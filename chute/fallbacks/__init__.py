"""CPU decode + augment: libjpeg-turbo (TurboJPEG API via Numba, and a small C shim of its
libjpeg API that decodes only a crop's region) and a fused resample pass.

Knows nothing of files or sampling: takes encoded bytes plus per-sample crop boxes and flips,
and writes into buffers it is given. Video frames are decoded with FFmpeg through PyAV
(`decode_frames`, loaded lazily so the image path never imports PyAV).
"""

from chute._lazy import lazy_attributes
from chute.fallbacks._decode import IMAGENET_MEAN, IMAGENET_STD, decode_batch, release_scratch
from chute.fallbacks._limits import MAX_IMAGE_PIXELS, max_image_pixels
from chute.fallbacks._roi_library import RoiDecoderStatus, roi_decoder_status
from chute.fallbacks._status import DecodeStatus
from chute.fallbacks._turbojpeg import turbojpeg_library

__all__ = [
    "decode_batch",
    "release_scratch",
    "max_image_pixels",
    "MAX_IMAGE_PIXELS",
    "turbojpeg_library",
    "roi_decoder_status",
    "RoiDecoderStatus",
    "DecodeStatus",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "decode_frames",
]

__getattr__, __dir__ = lazy_attributes(__name__, {"decode_frames": "chute.fallbacks._video"},
                                       globals(), __all__)
