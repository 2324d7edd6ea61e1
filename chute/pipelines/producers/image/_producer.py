"""What every image producer shares: one output of the spec's image shape, and crop boxes and
flips computed by the plan from the dataset's height/width columns."""

from __future__ import annotations

import numpy as np

from chute.pipelines._request import CropParams
from chute.pipelines.producers._contract import ImageSpec, Output

__all__ = ["ImageProducerBase"]


class ImageProducerBase:
    output_on_device = False

    def __init__(self, spec: ImageSpec):
        self.spec = spec
        self.field = spec.field

    def outputs(self) -> dict[str, Output]:
        shape = self.spec.image_shape(1)[1:]
        return {self.field: Output(shape, self.spec.numpy_dtype, self.output_on_device)}

    def size_table(self) -> np.ndarray:
        """int64 [N, 2]: (height, width) of every full image, from the dataset's columns, for
        decoders that pass them per batch (windows, header checks)."""
        ds = self.spec.dataset
        return np.stack([np.asarray(ds.column(n), np.int64) for n in self.spec.size_fields],
                        axis=1)

    def param_sources(self) -> tuple:
        height, width = self.spec.size_fields
        ds = self.spec.dataset
        return (CropParams(self.spec.crop, np.asarray(ds.column(height)),
                           np.asarray(ds.column(width))),)

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        return {self.field: self.spec.image_shape(len(request.ids))}
