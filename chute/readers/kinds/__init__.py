"""chute.readers.kinds: field kinds: the registry and one module per kind.

The names below are what `chute.convert` encodes and declares fields with."""

from chute._lazy import lazy_attributes

# public name -> module that defines it (loaded on first access: no import loop, and
# reading a local dataset loads no object storage code)
_LAZY = {
    "Encoded": "chute.readers.kinds._kind",
    "table_array": "chute.readers.kinds._kind_table",
    "write_table": "chute.readers.kinds._kind_table",
    "declare": "chute.readers.kinds._kinds",
    "field_files": "chute.readers.kinds._kinds",
    "field_stem": "chute.readers.kinds._kinds",
    "get_kind": "chute.readers.kinds._kinds",
    "infer_declaration": "chute.readers.kinds._kinds",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
