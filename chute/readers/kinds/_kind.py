"""What a field kind is: the contract every module `chute/readers/kinds/_kind_*.py` fulfils
(docs/design.md, "Field kinds"). The registry that maps kind names to them is
`readers/kinds/_kinds.py`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from chute.readers.storage._shard_files import ShardFiles

__all__ = ["FieldKind", "FieldReader", "ColumnWriter", "Encoded", "OpenArgs"]


@dataclass(frozen=True)
class Encoded:
    """One validated value, ready for a ColumnWriter; `payload` counts towards the shard size."""

    data: Any
    payload: int = 0


@dataclass(frozen=True)
class OpenArgs:
    """Where one field's files are: `<folder>/<stem>.*` for every shard, in shard order."""

    field: str
    spec: dict
    stem: str
    folders: list[Path]
    counts: list[int]
    trailing_index_ok: bool = False  # Megatron-LM may append sequence modes to an index
    # a remote dataset's payload files, fetched and mapped on first use (None: all local)
    files: ShardFiles | None = None


class ColumnWriter(Protocol):
    """Writes one field of one shard. `add` is called once per sample, in order."""

    def add(self, encoded: Encoded) -> None: ...

    def commit(self) -> dict[str, dict]:
        """Finish the files; returns {file name: manifest entry}."""
        ...

    def abort(self) -> None: ...


class FieldReader(Protocol):
    """One field over all shards of an open dataset.

    `get` returns one sample's value (zero-copy where the kind allows); `read` returns the
    values of a batch of global ids (already range-checked), filling `out` when the kind has a
    fixed-shape array output (`sample_shape` is not None)."""

    # read-only here, so that a kind's reader may declare a narrower type (e.g. never None)
    @property
    def sample_shape(self) -> tuple[int, ...] | None:
        """Per-sample array shape; None: no fixed shape."""
        ...

    @property
    def dtype(self) -> np.dtype | None: ...

    def get(self, shard: int, local: int, global_id: int) -> Any: ...

    def read(self, ids: np.ndarray, out: Any = None) -> Any: ...


class FieldKind(Protocol):
    """A field kind: its manifest spec, files, writer encoding, reader and info line."""

    name: str

    def declare(self, field: str, options: dict) -> dict:
        """The manifest spec for a declared field (may be completed by the first value)."""
        ...

    def infer(self, value: Any) -> dict | None:
        """A declaration (options with "kind") for a value when this kind stores it, else None."""
        ...

    def complete(self, field: str, spec: dict, value: Any) -> dict:
        """The spec after seeing the first value (e.g. an ndarray's dtype and shape)."""
        ...

    def check(self, field: str, spec: dict) -> str | None:
        """What is wrong with a spec read from a manifest, or None."""
        ...

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        """File name inside a shard -> role ("payload", "index", "columns" or "metadata")."""
        ...

    def encode(self, field: str, spec: dict, value: Any, sample: int) -> Encoded:
        """Validate and encode one value; ValueError names the sample and what is wrong."""
        ...

    def writer(self, folder: Path, stem: str, spec: dict) -> ColumnWriter: ...

    def open(self, args: OpenArgs) -> FieldReader: ...

    def describe(self, spec: dict) -> str:
        """What `chute info` says about the field's type, e.g. "ndarray float16 [4, 8, 8]"."""
        ...
