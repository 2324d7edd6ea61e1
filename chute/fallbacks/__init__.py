"""CPU decode + augment: libjpeg-turbo (TurboJPEG API via Numba) and a fused resample pass.

Knows nothing of files or sampling: takes encoded bytes plus per-sample crop boxes and flips,
and writes into buffers it is given.
"""

from chute.fallbacks._decode import IMAGENET_MEAN, IMAGENET_STD, decode_batch
from chute.fallbacks._status import DecodeStatus
from chute.fallbacks._turbojpeg import turbojpeg_library

__all__ = ["decode_batch", "turbojpeg_library", "DecodeStatus", "IMAGENET_MEAN", "IMAGENET_STD"]
