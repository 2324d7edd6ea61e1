"""CPU decode + augment: libjpeg-turbo (TurboJPEG API via Numba, and a small C shim of its
libjpeg API that decodes only a crop's region) and a fused resample pass.

Knows nothing of files or sampling: takes encoded bytes plus per-sample crop boxes and flips,
and writes into buffers it is given. Video frames are decoded with FFmpeg through PyAV
(`decode_frames`, loaded lazily so the image path never imports PyAV).
"""

from chute._lazy import lazy_attributes
from chute.fallbacks._decode import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    decode_batch,
    decode_views,
    release_scratch,
)
from chute.fallbacks._limits import MAX_IMAGE_PIXELS, max_image_pixels
from chute.fallbacks._resample import KIND_FLOAT16, KIND_FLOAT32, KIND_UINT8, resample_into
from chute.fallbacks._roi_library import RoiDecoderStatus, roi_decoder_status
from chute.fallbacks._status import DecodeStatus
from chute.fallbacks._turbojpeg import load as load_turbojpeg
from chute.fallbacks._turbojpeg import turbojpeg_library

# public name -> module that defines it (loaded on first access: PyAV, libsndfile's shim)
_LAZY = {
    "decode_frames": "chute.fallbacks._video",
    "fill_and_crop": "chute.fallbacks._video",
    "decode_segment": "chute.fallbacks._audio_segment",
    "segment_decoder_status": "chute.fallbacks._audio_segment",
}

__all__ = [
    "decode_batch",
    "decode_views",
    "release_scratch",
    "max_image_pixels",
    "MAX_IMAGE_PIXELS",
    "turbojpeg_library",
    "load_turbojpeg",
    "roi_decoder_status",
    "RoiDecoderStatus",
    "DecodeStatus",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "resample_into",
    "KIND_UINT8",
    "KIND_FLOAT32",
    "KIND_FLOAT16",
    *_LAZY,
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
