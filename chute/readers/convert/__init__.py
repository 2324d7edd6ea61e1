"""chute.readers.convert: converters: image folders, CSV, WebDataset, Hugging Face, audio, video,
zarr."""
