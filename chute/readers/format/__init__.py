"""chute.readers.format: the shard format on disk: manifest, MMIDIDX records, layout, writer."""
