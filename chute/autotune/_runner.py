"""Real candidates: a Pipeline with the candidate's backend and options, cycling epochs."""

from __future__ import annotations

from chute.autotune._candidates import Candidate
from chute.autotune._fingerprint import TuneParams
from chute.autotune._measure import BatchSource
from chute.errors import ChuteError

__all__ = ["pipeline_runner"]


def _synchronizer(device: str):
    if not device.startswith("cuda"):
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)


def pipeline_runner(dataset, params: TuneParams, *, seed: int = 0):
    """A Runner (Candidate -> BatchSource) that streams `dataset` through chute.Pipeline with
    the candidate's backend and backend_options, at the batch shape of `params`."""

    def open_source(candidate: Candidate) -> BatchSource:
        from chute.pipelines import Pipeline

        pipe = Pipeline(
            dataset,
            params.batch_size,
            image_size=params.image_size,
            augment=params.augment,
            backend=candidate.backend,
            backend_options=dict(candidate.params),
            device=params.device,
            dtype=params.dtype,
            seed=seed,
            fields=("image",),
        )
        state = {"epoch": 0, "batches": iter(pipe)}

        def next_batch() -> int:
            try:
                batch = next(state["batches"])
            except StopIteration:
                # a small dataset runs out within the window: go on with the next epoch
                state["epoch"] += 1
                pipe.set_epoch(state["epoch"])
                state["batches"] = iter(pipe)
                batch = next(state["batches"], None)
                if batch is None:
                    raise ChuteError(
                        f"dataset {getattr(dataset, 'path', dataset)} yields no batch of "
                        f"{params.batch_size} samples; use a smaller --batch-size"
                    ) from None
            return int(batch["image"].shape[0])

        return BatchSource(next_batch, _synchronizer(params.device), pipe.close)

    return open_source
