"""Producer `ndarray`: stored arrays gathered into `[B, *shape]` (latents, embeddings).

A ragged field (leading dimension varies) is padded with zeros to the longest sample of the
batch and comes with `<field>_lengths` (int64 [B]); a record that fails its integrity check
marks its sample failed, and the Pipeline substitutes it like an undecodable image.
"""

from __future__ import annotations

import numpy as np

from chute.pipelines._common._options import field_cast
from chute.pipelines.producers._contract import (
    Output,
    ProducerSpec,
    StoredFieldProducer,
    no_candidates,
    typed_options,
)
from chute.pipelines.producers.stored._options import ArrayOptions

__all__ = ["NdarrayProducer", "create", "candidates"]


class NdarrayProducer(StoredFieldProducer):
    name = "ndarray"

    def __init__(self, spec: ProducerSpec):
        options = typed_options(spec, ArrayOptions)
        self.field = spec.field
        self.reader = spec.dataset.reader(spec.field)
        self._lengths_key = f"{spec.field}_lengths"
        self.ragged = self.reader.lengths(np.empty(0, np.int64)) is not None
        self.cast = field_cast(f"field {spec.field!r} of {spec.dataset.path}",
                               self.reader.dtype, options.dtype)

    def outputs(self) -> dict[str, Output]:
        outputs = {self.field: Output(tuple(self.reader.sample_shape), self.reader.dtype,
                                    cast=self.cast)}
        if self.ragged:
            outputs[self._lengths_key] = Output((), np.dtype(np.int64))
        return outputs

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        b = len(request.ids)
        if not self.ragged:
            return {self.field: (b, *self.reader.sample_shape)}
        lengths = self.reader.lengths(request.ids)
        longest = int(lengths.max()) if b else 0
        return {self.field: (b, longest, *self.reader.sample_shape[1:]),
                self._lengths_key: (b,)}

    def fill(self, request, out: dict) -> np.ndarray:
        status = np.zeros(len(request.ids), np.uint8)
        self.reader.read(request.ids, out[self.field], status=status)
        if self.ragged:
            out[self._lengths_key][...] = self.reader.lengths(request.ids)
        return status


def create(spec: ProducerSpec) -> NdarrayProducer:
    return NdarrayProducer(spec)


candidates = no_candidates
