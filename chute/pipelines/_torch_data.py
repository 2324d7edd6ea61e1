"""A Pipeline where a `torch.utils.data.DataLoader` is expected (Lightning, Accelerate, code
that type-checks for one).

The Pipeline already batches, decodes in its own threads and partitions across ranks, so the
DataLoader around it only passes batches through: `batch_size=None` (no re-batching) and
`num_workers=0` (worker processes would each run a copy of the Pipeline). Lightning calls
`set_epoch` on `loader.sampler` at the start of every epoch; the loader built here forwards
that call to the Pipeline.
"""

from __future__ import annotations

import torch.utils.data

__all__ = ["PipelineDataset", "as_dataloader"]


class PipelineDataset(torch.utils.data.IterableDataset):
    """An `IterableDataset` whose items are the Pipeline's batches (use `batch_size=None`).

    Args:
        pipe: the Pipeline to deliver.
    """

    def __init__(self, pipe):
        self.pipe = pipe

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                "a chute Pipeline cannot run inside DataLoader worker processes (each would "
                "decode the whole epoch again); use DataLoader(..., batch_size=None, "
                "num_workers=0): the Pipeline has its own decoding threads")
        return iter(self.pipe)

    def __len__(self) -> int:
        return len(self.pipe)

    def set_epoch(self, epoch: int) -> None:
        """Forwarded to `Pipeline.set_epoch`."""
        self.pipe.set_epoch(epoch)

    def state_dict(self) -> dict:
        """`Pipeline.state_dict()` (Lightning's stateful-dataloader hook)."""
        return self.pipe.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """`Pipeline.load_state_dict(state)`."""
        self.pipe.load_state_dict(state)


class _EpochSampler(torch.utils.data.Sampler):
    """The loader's sampler: only there so that `loader.sampler.set_epoch(e)` reaches the
    Pipeline (how Lightning and many training loops start an epoch)."""

    def __init__(self, dataset: PipelineDataset):
        self.dataset = dataset

    def __iter__(self):
        while True:  # one placeholder index per item, as for any IterableDataset
            yield None

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


class _PipelineLoader(torch.utils.data.DataLoader):
    @property
    def sampler(self):
        return self._chute_sampler

    @sampler.setter
    def sampler(self, value) -> None:  # DataLoader.__init__ sets its own; ours is fixed
        pass


def as_dataloader(pipe) -> torch.utils.data.DataLoader:
    """A DataLoader delivering the Pipeline's batches unchanged, with `sampler.set_epoch`.

    Args:
        pipe: the Pipeline.
    """
    dataset = PipelineDataset(pipe)
    loader = _PipelineLoader(dataset, batch_size=None, num_workers=0,
                             collate_fn=_identity)
    object.__setattr__(loader, "_chute_sampler", _EpochSampler(dataset))
    return loader


def _identity(batch):
    return batch
