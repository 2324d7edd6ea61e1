"""Writing chute datasets, the layer above `chute.readers`: `ShardWriter` and the parts a
distributed convert writes (`PartWriter`), the converters (image folders, CSV, WebDataset,
Hugging Face, MosaicML Streaming (MDS), litdata, FFCV, audio, video, zarr) as `ConvertJob`s
that `run_job` runs here or on an engine, metadata updates, and `destination/` (where a write
goes: a locked local folder published in one rename, or object storage under a write lease).

`ShardWriter` and its parts load eagerly; the converters (which need PIL and tqdm) load on
first use."""

from chute._lazy import lazy_attributes
from chute.convert._writer import PartTarget, PartWriter, ShardWriter, infer_fields

# public name -> module that defines it (loaded on first access)
_LAZY = {
    "ConvertOptions": "chute.convert._convert",
    "ConvertReport": "chute.convert._jobs",
    "ConvertJob": "chute.convert._jobs",
    "Engine": "chute.convert._jobs",
    "run_job": "chute.convert._jobs",
    "ImageJob": "chute.convert._convert",
    "WebDatasetJob": "chute.convert._webdataset",
    "VideoJob": "chute.convert._convert_video",
    "AudioJob": "chute.convert._convert_audio",
    "ZarrJob": "chute.convert._convert_zarr",
    "HFJob": "chute.convert._hf",
    "convert_imagefolder": "chute.convert._convert",
    "convert_csv": "chute.convert._convert",
    "convert_zarr": "chute.convert._convert_zarr",
    "MetaUpdate": "chute.convert._meta_update",
    "update_metadata": "chute.convert._meta_update",
    "jpeg_is_complete": "chute.convert._images",
    "AudioConvertOptions": "chute.convert._convert_audio",
    "AudioConvertReport": "chute.convert._convert_audio",
    "convert_audio": "chute.convert._convert_audio",
    "write_dataset": "chute.convert._write_dataset",
    "with_jpeg": "chute.convert._write_dataset",
    "image_declarations": "chute.convert._write_dataset",
    "convert_video_csv": "chute.convert._convert_video",
    "probe_video": "chute.convert._video_probe",
    "VideoInfo": "chute.convert._video_probe",
    "UnreadableVideo": "chute.convert._video_probe",
    "iter_webdataset": "chute.convert._webdataset",
    "convert_webdataset": "chute.convert._webdataset",
    "WEBDATASET_MAX_MEMBER": "chute.convert._webdataset",
    "hf_samples": "chute.convert._hf",
    "convert_mds": "chute.convert._mds",
    "MDSJob": "chute.convert._mds",
    "convert_litdata": "chute.convert._litdata",
    "LitdataJob": "chute.convert._litdata",
    "MDS_MAPPING": "chute.convert._mds",
    "convert_ffcv": "chute.convert._ffcv",
    "FFCVJob": "chute.convert._ffcv",
    "FFCV_MAPPING": "chute.convert._ffcv",
    "LITDATA_MAPPING": "chute.convert._litdata",
    "segment_frames": "chute.convert._audio_sources",
    "TRANSCODE_QUALITY": "chute.convert._transcode",
}

__all__ = [
    "ShardWriter",
    "PartTarget",
    "PartWriter",
    "infer_fields",
    *_LAZY,
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
