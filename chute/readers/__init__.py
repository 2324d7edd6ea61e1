"""The chute v1 shard format: writer, memory-mapped reader, Megatron-LM .bin/.idx import."""

from chute.readers._dataset import Dataset, open_dataset
from chute.readers._errors import SampleIndexError
from chute.readers._sizes import format_size, parse_size
from chute.readers._writer import ShardWriter

__all__ = [
    "Dataset",
    "open_dataset",
    "ShardWriter",
    "SampleIndexError",
    "parse_size",
    "format_size",
]
