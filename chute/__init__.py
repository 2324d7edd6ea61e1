"""chute: decoded, augmented image batches for PyTorch training, as fast as the machine allows.

Public names are listed once in ``__all__`` and loaded lazily, so ``import chute`` is cheap and
never touches torch, numba or any GPU library until a name that needs it is used.
"""

from __future__ import annotations

import importlib

from chute.errors import BackendUnavailableError, ChuteError, DecodeError, FormatError

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "open_dataset": "chute.readers",
    "Dataset": "chute.readers",
    "ShardWriter": "chute.readers",
    "Pipeline": "chute.pipelines",
    "CropConfig": "chute.pipelines",
    "crop_boxes": "chute.pipelines",
}

__all__ = [
    "__version__",
    "ChuteError",
    "FormatError",
    "DecodeError",
    "BackendUnavailableError",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chute' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
