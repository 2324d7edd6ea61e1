"""chute.readers.kinds: field kinds: the registry and one module per kind."""
