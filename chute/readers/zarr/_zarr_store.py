"""zarr's local store, confined: every key zarr reads (group and array metadata, consolidated
metadata, shard and chunk files of arrays read through zarr) must resolve inside the store,
else a FormatError naming the store and the key (docs/design.md, "Zarr groups"). A byte range
past the end of its file, or an empty file read whole, is a FormatError too: zarr asks for a
shard's index and chunks by range (or for the whole shard), and takes a range that comes back
short or empty for chunks never written (fill values); zarr never writes an empty file.

A check resolves one path (`_paths.Confined.check`); zarr reads through here only what chute
does not read itself (metadata, sharded arrays, other codecs), where a call costs milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.storage import LocalStore

from chute.errors import FormatError
from chute.readers.storage._paths import Confined, check_regular

__all__ = ["ConfinedStore", "STORE"]

STORE = "zarr store"  # what messages call the folder


class ConfinedStore(LocalStore):
    """A read-only LocalStore whose reads stay inside `root` (symlinks followed)."""

    def __init__(self, root: Path | str, *, read_only: bool = True) -> None:
        super().__init__(root, read_only=read_only)
        self.confined = Confined(root, STORE)

    def _checked(self, key: str) -> str:
        # a FIFO would block zarr's read forever, a folder raises deep inside zarr: both are
        # refused here, naming the file (absent stays absent: zarr's fill value)
        check_regular(self.confined.check(self.root / key, f"entry {key!r}"),
                      f"entry {key!r} of zarr store {self.root}")
        return key

    def _whole(self, key: str, byte_range, value):
        """`value`, after checking it holds every byte of `byte_range` that was asked for."""
        if value is None:
            return value
        if byte_range is None:
            want = 1  # a file zarr wrote holds something
        elif isinstance(byte_range, RangeByteRequest):
            want = byte_range.end - byte_range.start
        elif isinstance(byte_range, SuffixByteRequest):
            want = byte_range.suffix
        else:
            return value
        if len(value) < want:
            raise FormatError(f"{self.root / key}: entry {key!r} of zarr store {self.root} ends "
                              f"{want - len(value)} bytes before the range zarr reads "
                              f"({byte_range or 'the whole file'}); the file is truncated: "
                              "restore the store")
        return value

    def get_sync(self, key, *, prototype=None, byte_range=None):
        value = super().get_sync(self._checked(key), prototype=prototype, byte_range=byte_range)
        return self._whole(key, byte_range, value)

    async def get(self, key, prototype=None, byte_range=None):
        return self._whole(key, byte_range,
                           await super().get(self._checked(key), prototype, byte_range))

    async def get_partial_values(self, prototype, key_ranges):
        key_ranges = [(self._checked(key), byte_range) for key, byte_range in key_ranges]
        values = await super().get_partial_values(prototype, key_ranges)
        return [self._whole(key, r, v) for (key, r), v in zip(key_ranges, values, strict=True)]
