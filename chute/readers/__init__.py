"""The chute v1 shard format: field kinds (a registry, `_kinds.py`), writer, memory-mapped
reader, Megatron-LM .bin/.idx import, converters (image folders, CSV), inspection, verification
and metadata updates.

The reading/writing names load eagerly; the converters (which need PIL and tqdm) load on first
use, so processes that only read a dataset stay light."""

from chute._lazy import lazy_attributes
from chute.readers._dataset import Dataset, open_dataset
from chute.readers._errors import SampleIndexError
from chute.readers._protocol import DatasetProtocol
from chute.readers._sizes import format_size, parse_size
from chute.readers._storage import DatasetRef, open_url
from chute.readers._writer import ShardWriter

# public name -> module that defines it (loaded on first access)
_LAZY = {
    "ConvertOptions": "chute.readers._convert",
    "ConvertReport": "chute.readers._convert",
    "convert_imagefolder": "chute.readers._convert",
    "convert_csv": "chute.readers._convert",
    "convert_zarr": "chute.readers._convert_zarr",
    "dataset_info": "chute.readers._inspect",
    "verify_dataset": "chute.readers._inspect",
    "MetaUpdate": "chute.readers._meta_update",
    "update_metadata": "chute.readers._meta_update",
    "jpeg_is_complete": "chute.readers._images",
    "AudioConvertOptions": "chute.readers._convert_audio",
    "AudioConvertReport": "chute.readers._convert_audio",
    "convert_audio": "chute.readers._convert_audio",
    "write_dataset": "chute.readers._write_dataset",
    "convert_video_csv": "chute.readers._convert_video",
    "iter_webdataset": "chute.readers._webdataset",
    "segment_frames": "chute.readers._audio_sources",
    "compressors": "chute.readers._zarr_codecs",
    "TRANSCODE_QUALITY": "chute.readers._transcode",
}

__all__ = [
    "Dataset",
    "DatasetProtocol",
    "open_dataset",
    "open_url",
    "DatasetRef",
    "ShardWriter",
    "SampleIndexError",
    "parse_size",
    "format_size",
    *_LAZY,
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
