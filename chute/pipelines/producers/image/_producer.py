"""What every image producer shares: one output of the spec's image shape (or one per view, for
multi-crop views), and crop boxes and flips computed by the plan from the dataset's
height/width columns."""

from __future__ import annotations

import numpy as np

from chute._output_types import image_batch_shape
from chute.pipelines.producers._contract import ImageSpec, Output
from chute.pipelines.producers.image._crops import CropParams
from chute.pipelines.producers.image._views import ViewParams, view_key

__all__ = ["ImageProducerBase"]


class ImageProducerBase:
    output_on_device = False

    def __init__(self, spec: ImageSpec):
        self.spec = spec
        self.field = spec.field

    def outputs(self) -> dict[str, Output]:
        if self.spec.views:
            return {key: Output(shape[1:], self.spec.numpy_dtype, self.output_on_device)
                    for key, shape in self.view_shapes(1).items()}
        shape = self.spec.image_shape(1)[1:]
        return {self.field: Output(shape, self.spec.numpy_dtype, self.output_on_device)}

    def view_shapes(self, batch: int) -> dict[str, tuple[int, ...]]:
        """Output key -> batch shape of every view (empty without views)."""
        layout = self.spec.layout
        return {view_key(self.field, v): image_batch_shape(batch, crop.size[0], crop.size[1],
                                                           layout)
                for v, crop in enumerate(self.spec.views)}

    def size_table(self) -> np.ndarray:
        """int64 [N, 2]: (height, width) of every full image, from the dataset's columns, for
        decoders that pass them per batch (windows, header checks)."""
        ds = self.spec.dataset
        return np.stack([np.asarray(ds.column(n), np.int64) for n in self.spec.size_fields],
                        axis=1)

    def param_sources(self) -> tuple:
        height, width = self.spec.size_fields
        ds = self.spec.dataset
        heights, widths = np.asarray(ds.column(height)), np.asarray(ds.column(width))
        if self.spec.views:
            return (ViewParams(self.field, tuple(self.spec.views), heights, widths),)
        return (CropParams(self.spec.crop, heights, widths),)

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        if self.spec.views:
            return self.view_shapes(len(request.ids))
        return {self.field: self.spec.image_shape(len(request.ids))}
