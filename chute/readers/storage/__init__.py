"""chute.readers.storage: where bytes live: local files, confined paths, atomic publish, locks,
URLs."""
