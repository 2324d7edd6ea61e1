"""zarr's local store, confined: every key zarr reads (group and array metadata, consolidated
metadata, shard and chunk files of arrays read through zarr) must resolve inside the store,
else a FormatError naming the store and the key (docs/design.md, "Zarr groups").

A check resolves one path (`_paths.Confined.check`); zarr reads through here only what chute
does not read itself (metadata, sharded arrays, other codecs), where a call costs milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from zarr.storage import LocalStore

from chute.readers._paths import Confined

__all__ = ["ConfinedStore", "STORE"]

STORE = "zarr store"  # what messages call the folder


class ConfinedStore(LocalStore):
    """A read-only LocalStore whose reads stay inside `root` (symlinks followed)."""

    def __init__(self, root: Path | str, *, read_only: bool = True) -> None:
        super().__init__(root, read_only=read_only)
        self.confined = Confined(root, STORE)

    def _checked(self, key: str) -> str:
        self.confined.check(self.root / key, f"entry {key!r}")
        return key

    def get_sync(self, key, *, prototype=None, byte_range=None):
        return super().get_sync(self._checked(key), prototype=prototype, byte_range=byte_range)

    async def get(self, key, prototype=None, byte_range=None):
        return await super().get(self._checked(key), prototype, byte_range)

    async def get_partial_values(self, prototype, key_ranges):
        key_ranges = [(self._checked(key), byte_range) for key, byte_range in key_ranges]
        return await super().get_partial_values(prototype, key_ranges)
