"""Which dataset a decision is for: its path and its fingerprint, nothing else.

The library never opens a dataset. Callers pass an opened one (anything with `.path` and
`.fingerprint`) or a `DatasetIdentity`; the fingerprint changes whenever the data does, so a
decision is never reused for rewritten data at the same path.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DatasetIdentity", "dataset_identity"]


@dataclass(frozen=True)
class DatasetIdentity:
    """A dataset as a decision records it.

    Attributes:
        path: where the dataset lives (shown in the stored record, not part of the key).
        fingerprint: the dataset's content fingerprint (part of the key).
    """

    path: str
    fingerprint: str


def dataset_identity(dataset) -> DatasetIdentity:
    """The identity of `dataset`.

    Args:
        dataset: a `DatasetIdentity`, or any object with `.path` and `.fingerprint` (an opened
            chute dataset).

    Raises:
        TypeError: `dataset` has no `.path` or no `.fingerprint` (for instance a bare path: open
            it first).
    """
    if isinstance(dataset, DatasetIdentity):
        return dataset
    try:
        return DatasetIdentity(str(dataset.path), str(dataset.fingerprint))
    except AttributeError:
        raise TypeError(
            f"autotune needs a dataset identity, got {dataset!r}: pass an opened dataset (with "
            ".path and .fingerprint) or chute.autotune.DatasetIdentity(path, fingerprint); "
            "open a path with chute.open_dataset first"
        ) from None
