"""chute.readers.convert: converters: image folders, CSV, WebDataset, Hugging Face, MosaicML
Streaming (MDS), litdata, audio, video, zarr."""
