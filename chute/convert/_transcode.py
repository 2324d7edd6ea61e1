"""How images that are not stored as they are get re-encoded (kept free of Pillow, so the CLI
can name the default without importing it)."""

from __future__ import annotations

__all__ = ["TRANSCODE_QUALITY"]

# JPEG quality of transcoded and downscaled images, written without chroma subsampling: eval
# on PNG copies of photos then differs from torchvision's transform on the PNGs by a median
# MAE of 0.21 (the resampler alone: 0.17); quality 95 with 4:2:0 chroma gave 1.19 (README,
# "The dataset format and its commands").
TRANSCODE_QUALITY = 100
