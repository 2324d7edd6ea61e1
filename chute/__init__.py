"""chute: decoded, augmented batches (images, video, audio, latents) for PyTorch, as fast as the
machine allows.

Public names are listed once in ``__all__`` and loaded lazily, so ``import chute`` is cheap and
never touches torch, numba or any GPU library until a name that needs it is used.
"""

from __future__ import annotations

from chute._lazy import lazy_attributes
from chute._version import __version__
from chute.errors import BackendUnavailableError, ChuteError, DecodeError, FormatError

# public name -> module that defines it
_LAZY = {
    "open_dataset": "chute.readers",
    "Dataset": "chute.readers",
    "ShardWriter": "chute.convert",
    "Pipeline": "chute.pipelines",
    "ImageOptions": "chute.pipelines",
    "VideoOptions": "chute.pipelines",
    "AudioOptions": "chute.pipelines",
    "FbankOptions": "chute.pipelines",
    "ArrayOptions": "chute.pipelines",
    "Lookup": "chute.pipelines",
    "MaxDuration": "chute.pipelines",
    "Buckets": "chute.pipelines",
    "CropConfig": "chute.pipelines",
    "PipelineDataset": "chute.pipelines",
    "crop_boxes": "chute.pipelines",
    "View": "chute.pipelines",
    "mix": "chute.pipelines",
    "ShardWindows": "chute.pipelines",
}

__all__ = [
    "__version__",
    "ChuteError",
    "FormatError",
    "DecodeError",
    "BackendUnavailableError",
    *_LAZY,
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
