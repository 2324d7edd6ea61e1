"""Running an autotune candidate for real: a Pipeline with the candidate's backend and options,
cycling epochs, driven by the autotuner's measurement harness.

The returned sources have the methods the harness calls (next_batch, synchronize, close; see
chute.autotune.BatchSourceLike) without importing the autotuner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

from chute.errors import ChuteError

__all__ = ["PipelineSource", "pipeline_runner"]


class PipelineSource:
    """Batches of one Pipeline, epoch after epoch, counted in samples (images, clips, ...).

    Args:
        pipe: the Pipeline to drive (closed by `close`).
        device: where its batches are delivered ("cuda:N" makes `synchronize` wait for it).
        no_batch: the error message when a whole epoch yields no batch.
    """

    def __init__(self, pipe, device: str, *, no_batch: str):
        self._pipe = pipe
        self._device = device
        self._no_batch = no_batch
        self._epoch = 0
        self._batches = iter(pipe)

    def next_batch(self) -> int:
        """Produce one batch; return its sample count."""
        batch = next(self._batches, None)
        if batch is None:
            # a small dataset runs out within the window: go on with the next epoch
            self._epoch += 1
            self._pipe.set_epoch(self._epoch)
            self._batches = iter(self._pipe)
            batch = next(self._batches, None)
            if batch is None:
                raise ChuteError(self._no_batch)
        return len(batch["index"])

    def synchronize(self) -> None:
        """Wait for the device work queued so far (so a timed window ends honestly)."""
        if self._device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self._device)

    def close(self) -> None:
        """Stop the Pipeline's threads and free its buffers."""
        self._pipe.close()


def pipeline_runner(
    dataset,
    *,
    batch_size: int,
    image_size: tuple[int, int],
    augment: str,
    dtype: str,
    device: str,
    seed: int = 0,
) -> Callable[[object], PipelineSource]:
    """A runner for the autotuner: candidate -> `PipelineSource` streaming `dataset` through a
    Pipeline with the candidate's `backend` and `params` (as backend_options).

    Args:
        dataset: an opened dataset.
        batch_size: images per batch.
        image_size: output (height, width).
        augment: "train" or "eval".
        dtype: output dtype name ("float16", "float32", "uint8").
        device: where batches are delivered.
        seed: the Pipeline seed (the order does not change throughput).
    """
    no_batch = (f"dataset {dataset.path} yields no batch of {batch_size} "
                "samples; use a smaller --batch-size")

    def open_source(candidate) -> PipelineSource:
        from chute.pipelines._pipeline import Pipeline
        from chute.pipelines.producers.image._options import ImageOptions

        image = ImageOptions(size=image_size, backend=candidate.backend,
                             backend_options=dict(candidate.params), dtype=dtype)
        # a str from TuneParams, which (like Pipeline) accepts only "train" or "eval"
        mode = cast(Literal["train", "eval"], augment)
        pipe = Pipeline(dataset, batch_size, fields={"image": image}, augment=mode,
                        device=device, seed=seed)
        return PipelineSource(pipe, device, no_batch=no_batch)

    return open_source
