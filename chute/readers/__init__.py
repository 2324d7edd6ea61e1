"""The chute v1 shard format and its sources, by concept: `format/` (manifest, records, layout,
writer), `storage/` (confined local files, atomic publish, URLs, object storage and the
node cache), `kinds/` (the field kind
registry), `zarr/` (zarr groups read as datasets), `convert/` (image folders, CSV, WebDataset,
Hugging Face, MosaicML Streaming (MDS), litdata, audio, video, zarr); here the Dataset,
Megatron-LM .bin/.idx import, inspection, verification and metadata updates.

The reading/writing names load eagerly; the converters (which need PIL and tqdm) load on first
use, so processes that only read a dataset stay light."""

from chute._lazy import lazy_attributes
from chute.readers._dataset import Dataset, open_dataset
from chute.readers._errors import SampleIndexError
from chute.readers._protocol import DatasetProtocol
from chute.readers._sizes import format_size, parse_size
from chute.readers.format._writer import PartTarget, PartWriter, ShardWriter, infer_fields
from chute.readers.storage._storage import DatasetRef, local_path, open_url

# public name -> module that defines it (loaded on first access)
_LAZY = {
    "ConvertOptions": "chute.readers.convert._convert",
    "ConvertReport": "chute.readers.convert._jobs",
    "ConvertJob": "chute.readers.convert._jobs",
    "Engine": "chute.readers.convert._jobs",
    "run_job": "chute.readers.convert._jobs",
    "ImageJob": "chute.readers.convert._convert",
    "WebDatasetJob": "chute.readers.convert._webdataset",
    "VideoJob": "chute.readers.convert._convert_video",
    "AudioJob": "chute.readers.convert._convert_audio",
    "ZarrJob": "chute.readers.convert._convert_zarr",
    "HFJob": "chute.readers.convert._hf",
    "convert_imagefolder": "chute.readers.convert._convert",
    "convert_csv": "chute.readers.convert._convert",
    "convert_zarr": "chute.readers.convert._convert_zarr",
    "dataset_info": "chute.readers._inspect",
    "verify_dataset": "chute.readers._inspect",
    "verify_kind": "chute.readers._inspect",
    "MetaUpdate": "chute.readers._meta_update",
    "update_metadata": "chute.readers._meta_update",
    "jpeg_is_complete": "chute.readers.convert._images",
    "AudioConvertOptions": "chute.readers.convert._convert_audio",
    "AudioConvertReport": "chute.readers.convert._convert_audio",
    "convert_audio": "chute.readers.convert._convert_audio",
    "write_dataset": "chute.readers.convert._write_dataset",
    "with_jpeg": "chute.readers.convert._write_dataset",
    "image_declarations": "chute.readers.convert._write_dataset",
    "convert_video_csv": "chute.readers.convert._convert_video",
    "probe_video": "chute.readers.convert._video_probe",
    "VideoInfo": "chute.readers.convert._video_probe",
    "UnreadableVideo": "chute.readers.convert._video_probe",
    "iter_webdataset": "chute.readers.convert._webdataset",
    "convert_webdataset": "chute.readers.convert._webdataset",
    "WEBDATASET_MAX_MEMBER": "chute.readers.convert._webdataset",
    "hf_samples": "chute.readers.convert._hf",
    "convert_mds": "chute.readers.convert._mds",
    "MDSJob": "chute.readers.convert._mds",
    "convert_litdata": "chute.readers.convert._litdata",
    "LitdataJob": "chute.readers.convert._litdata",
    "MDS_MAPPING": "chute.readers.convert._mds",
    "convert_ffcv": "chute.readers.convert._ffcv",
    "FFCVJob": "chute.readers.convert._ffcv",
    "FFCV_MAPPING": "chute.readers.convert._ffcv",
    "LITDATA_MAPPING": "chute.readers.convert._litdata",
    "segment_frames": "chute.readers.convert._audio_sources",
    "compressors": "chute.readers.zarr._zarr_codecs",
    "is_zarr_group": "chute.readers.zarr._zarr",
    "TRANSCODE_QUALITY": "chute.readers.convert._transcode",
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
    "ShardWriter",
    "PartTarget",
    "PartWriter",
    "infer_fields",
    "SampleIndexError",
    "parse_size",
    "format_size",
    *_LAZY,
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
