"""Producer `lookup`: rows of a table (stored once) looked up through a per-sample index field,
e.g. one CLIP embedding per video for every segment of it: `out[k] = table[index[ids[k]]]`
(docs/design.md, "Tables and lookups"). The Pipeline builds it for `fields={table: Lookup(index)}`.
"""

from __future__ import annotations

import numpy as np

from chute.errors import FormatError
from chute.pipelines._common._options import field_cast
from chute.pipelines.producers._contract import (
    Output,
    ProducerSpec,
    StoredFieldProducer,
    no_candidates,
    typed_options,
)
from chute.pipelines.producers.stored._options import Lookup

__all__ = ["LookupProducer", "create", "candidates"]


class LookupProducer(StoredFieldProducer):
    name = "lookup"

    def __init__(self, spec: ProducerSpec):
        options = typed_options(spec, Lookup)
        ds, table, index = spec.dataset, spec.field, options.index
        self.field = table
        self.reader = ds.reader(table)
        rows = getattr(self.reader, "num_rows", None)
        if index is None:
            raise ValueError(f"field {table!r} of {ds.path} is a table of {rows} rows, not one "
                             f"row per sample ({len(ds)} samples); deliver it through an index "
                             f"field: Pipeline(..., fields={{{table!r}: Lookup(INDEX_FIELD)}})")
        if rows is None or ds.fields.get(table) != "table":
            raise ValueError(f"Lookup: field {table!r} of {ds.path} is a per-sample field, not "
                             "a table; request it without Lookup")
        try:
            column = np.asarray(ds.column(index))
        except KeyError as exc:
            raise ValueError(f"Lookup: index field {index!r} for table {table!r} must be a "
                             f"per-sample integer column ({exc.args[0]})") from None
        if column.dtype.kind not in "iu":
            raise ValueError(f"Lookup: index field {index!r} of {ds.path} holds "
                             f"{column.dtype}, not integers; it cannot index table {table!r}")
        bad = np.flatnonzero((column < 0) | (column >= rows))
        if bad.size:
            s = int(bad[0])
            # the data is wrong, not the call: a FormatError (a ValueError too)
            raise FormatError(f"Lookup: index field {index!r} of {ds.path} has value "
                             f"{int(column[s])} at sample {s} ({bad.size} bad samples), outside "
                             f"table {table!r}'s rows 0..{rows - 1}; fix the index column")
        self.index = column.astype(np.int64)
        self.cast = field_cast(f"table {table!r} of {ds.path}", self.reader.dtype,
                               options.dtype)

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output(tuple(self.reader.sample_shape), self.reader.dtype,
                                    cast=self.cast)}

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: (len(request.ids), *self.reader.sample_shape)}

    def fill(self, request, out: dict) -> np.ndarray:
        status = np.zeros(len(request.ids), np.uint8)
        self.reader.read(self.index[request.ids], out[self.field], status=status)
        return status


def create(spec: ProducerSpec) -> LookupProducer:
    return LookupProducer(spec)


candidates = no_candidates
