"""What the rest of chute needs from a dataset: the Dataset Protocol. A chute folder, a
Megatron pair and, later, other sources (zarr groups) are opened behind it
(docs/design.md, "Storage and identity")."""

from __future__ import annotations

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
