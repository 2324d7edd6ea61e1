"""Reading the chute v1 shard format, by concept: `format/` (manifest, records, layout),
`storage/` (confined local files, URLs, object storage and the node cache), `kinds/` (the
field kind registry), `zarr/` (zarr groups read as datasets); here the Dataset, Megatron-LM
.bin/.idx import, inspection and verification. Writing (converters, `ShardWriter`, parts,
metadata updates) is `chute.convert`, the layer above.

The reading names load eagerly; inspection, zarr and object storage load on first use, so
processes that only read a local dataset stay light."""

from chute._lazy import lazy_attributes
from chute.readers._dataset import Dataset
from chute.readers._errors import SampleIndexError
from chute.readers._open import DatasetRef, open_dataset, open_url
from chute.readers._protocol import DatasetProtocol
from chute.readers._sizes import format_size, parse_size
from chute.readers.storage._storage import local_path

# public name -> module that defines it (loaded on first access)
_LAZY = {
    "dataset_info": "chute.readers._inspect",
    "verify_dataset": "chute.readers._inspect",
    "verify_kind": "chute.readers._inspect",
    "compressors": "chute.readers.zarr._zarr_codecs",
    "is_zarr_group": "chute.readers.zarr._zarr",
    "StorageError": "chute.readers.storage._object_store",
    "CacheFullError": "chute.readers.storage._node_cache",
    "is_remote": "chute.readers.storage._object_store",
}

__all__ = [
    "Dataset",
    "DatasetProtocol",
    "open_dataset",
    "open_url",
    "DatasetRef",
    "local_path",
    "SampleIndexError",
    "parse_size",
    "format_size",
    *_LAZY,
]

# Writing moved to chute.convert (docs/design.md, "Layers"); the round-3 spelling still loads
# these, with a DeprecationWarning, and is not a layer import (tests/test_layering.py)
_MOVED = dict.fromkeys([
    "ShardWriter", "PartTarget", "PartWriter", "infer_fields", "MetaUpdate", "update_metadata",
    "ConvertOptions", "ConvertReport", "ConvertJob", "Engine", "run_job",
    "ImageJob", "WebDatasetJob", "VideoJob", "AudioJob", "ZarrJob",
    "HFJob", "convert_imagefolder", "convert_csv", "convert_zarr",
    "jpeg_is_complete", "AudioConvertOptions", "AudioConvertReport", "convert_audio",
    "write_dataset", "with_jpeg", "image_declarations", "convert_video_csv", "probe_video",
    "VideoInfo", "UnreadableVideo", "iter_webdataset", "convert_webdataset",
    "WEBDATASET_MAX_MEMBER",
    "hf_samples", "convert_mds", "MDSJob", "convert_litdata", "LitdataJob",
    "MDS_MAPPING", "convert_ffcv", "FFCVJob", "FFCV_MAPPING", "LITDATA_MAPPING",
    "segment_frames", "TRANSCODE_QUALITY",
], "chute.convert")

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__, moved=_MOVED)
