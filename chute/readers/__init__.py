"""The chute v1 shard format: writer, memory-mapped reader, Megatron-LM .bin/.idx import,
converters (image folders, CSV), inspection, verification and metadata updates."""

from chute.readers._convert import (
    ConvertOptions,
    ConvertReport,
    convert_csv,
    convert_imagefolder,
)
from chute.readers._dataset import Dataset, open_dataset
from chute.readers._errors import SampleIndexError
from chute.readers._images import jpeg_is_complete
from chute.readers._inspect import dataset_info, verify_dataset
from chute.readers._meta_update import MetaUpdate, update_metadata
from chute.readers._sizes import format_size, parse_size
from chute.readers._writer import ShardWriter

__all__ = [
    "Dataset",
    "open_dataset",
    "ShardWriter",
    "SampleIndexError",
    "ConvertOptions",
    "ConvertReport",
    "convert_imagefolder",
    "convert_csv",
    "dataset_info",
    "verify_dataset",
    "MetaUpdate",
    "update_metadata",
    "jpeg_is_complete",
    "parse_size",
    "format_size",
]
