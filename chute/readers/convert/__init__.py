"""chute.readers.convert: converters: image folders, CSV, WebDataset, Hugging Face, MosaicML
Streaming (MDS), litdata, FFCV, audio, video, zarr."""
