"""chute.readers.zarr: zarr groups read as datasets: store, chunks, codecs, native readers.

The names below are what `chute.convert` reads zarr stores with."""

from chute._lazy import lazy_attributes

# public name -> module that defines it (loaded on first access: no import loop, and
# reading a local dataset loads no object storage code)
_LAZY = {
    "ZarrDataset": "chute.readers.zarr._zarr",
    "constants_json": "chute.readers.zarr._zarr",
    "ConfinedStore": "chute.readers.zarr._zarr_store",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
