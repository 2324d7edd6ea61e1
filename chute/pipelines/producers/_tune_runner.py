"""Running an autotune candidate for real: a Pipeline with the candidate's backend and options,
cycling epochs, driven by the autotuner's measurement harness.

The producers sit below the Pipeline, so they do not import it: `_pipeline.py` hands its class
in with `use_pipeline` when it is imported, and a family's auto hook builds its measuring
Pipelines with `open_pipeline` (docs/design.md, "Layers inside pipelines/").

The returned sources have the methods the harness calls (next_batch, synchronize, close; see
chute.autotune.BatchSourceLike) without importing the autotuner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute.errors import ChuteError

__all__ = ["PipelineSource", "open_pipeline", "use_pipeline"]

_PIPELINE: list[Callable[..., Any]] = []  # the Pipeline class, handed in by _pipeline.py


def use_pipeline(pipeline: Callable[..., Any]) -> None:
    """Make `pipeline` what `open_pipeline` builds (`_pipeline.py` passes `Pipeline`).

    Args:
        pipeline: called as `pipeline(dataset, batch_size, **keywords)`.
    """
    _PIPELINE[:] = [pipeline]


def open_pipeline(dataset, batch_size: int, **keywords) -> Any:
    """A Pipeline over `dataset` to measure a candidate with.

    Args:
        dataset: the opened dataset.
        batch_size: samples per batch.
        **keywords: the Pipeline's other arguments (fields, augment, device, ...).
    """
    if not _PIPELINE:
        raise ChuteError("backend='auto' measures its candidates through Pipelines, and none "
                         "was handed in: import chute.pipelines (it hands in Pipeline) first")
    return _PIPELINE[0](dataset, batch_size, **keywords)


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
