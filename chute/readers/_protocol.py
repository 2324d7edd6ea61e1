"""What the rest of chute needs from a dataset: the Dataset Protocol. A chute folder, a
Megatron pair and, later, other sources (zarr groups) are opened behind it
(docs/design.md, "Storage and identity")."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from chute.readers.kinds._kind import FieldReader

__all__ = ["DatasetProtocol"]


@runtime_checkable
class DatasetProtocol(Protocol):
    """A readable dataset.

    Attributes:
        path: where it is, for messages.
        url: its storage URL; with `fingerprint` (what the data is) its identity across
            processes (`DatasetRef`).
        fields: field name -> kind name; specs: field name -> manifest spec.

    Optional capabilities have a default here, which a dataset class gets by subclassing
    this Protocol (chute's own do) and may override:

    - `sampler`: the source's own epoch order (chute.mix's); None: the Pipeline orders.
    - `delivered_fields`: fields every batch holds though not requested (a mix's "source").
    - `earlier_fingerprints`: what earlier formats called this data, so their saved
      states still load.
    - `shard_starts`: the first sample of every shard, then the count; None: no shards
      (`ShardWindows` then refuses the dataset).
    - `why_missing(name)`, `ref()`, `prefetch(batches)`, `close()`: see each.
    """

    path: Path
    fingerprint: str
    fields: dict[str, str]
    specs: dict[str, dict]

    @property
    def url(self) -> str: ...

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> dict: ...

    def locate(self, i: int) -> tuple[str, int]: ...

    def reader(self, field: str) -> FieldReader: ...

    def read(self, field: str, ids: Any, out: Any = None) -> Any: ...

    def column(self, name: str) -> np.ndarray: ...

    def gather(self, ids: Any, field: str = "image", out: np.ndarray | None = None): ...

    sampler: Any = None
    delivered_fields: tuple[str, ...] = ()
    earlier_fingerprints: tuple[str, ...] = ()

    @property
    def shard_starts(self) -> np.ndarray | None:
        """The first sample of every shard, then the sample count; None: no shards."""
        return None

    def why_missing(self, name: str) -> str | None:
        """Why field `name` is absent (a mix: which source lacks it); None: no more to say.

        Args:
            name: the requested field.
        """
        return None

    def ref(self) -> Any:
        """How other processes reopen this dataset: its `DatasetRef` unless overridden."""
        from chute.readers._open import DatasetRef

        return DatasetRef.of(self)

    def prefetch(self, batches: Iterable[np.ndarray]) -> Any:
        """Fetch ahead what `batches` (sample ids in reading order) need: a handle with
        `close()`, or None when there is nothing to fetch (the default: local data).

        Args:
            batches: each batch's sample ids, in the order they will be read.
        """
        return None

    def close(self) -> None:
        """Release what the dataset holds open (the default holds nothing)."""
        return None
