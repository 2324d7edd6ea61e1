"""chute.readers.zarr: zarr groups read as datasets: store, chunks, codecs, native readers."""
